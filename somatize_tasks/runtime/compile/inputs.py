"""Checking what a run is given besides its plan: ``params``, ``ops`` and values.

Done before anything is recorded or published, so a typo is one clear error
at submit time instead of a failed node (or a raw ``TypeError``) later:

- every node id is safe as a storage key;
- ``params`` maps node ids of the plan to objects of keyword parameters, and
  ``ops`` node ids of the plan to catalog names;
- where the producer's catalog holds a node's entry, its parameters fit the
  entry's signature (a worker checks again before it calls the node, since
  only the worker's catalog is certain);
- values nest at most :data:`~scheduler.model.depth.MAX_JSON_DEPTH` levels.

Every error names the node and the parameter, and lists at most a few of
many problems (:func:`scheduler.errors.listing`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from scheduler import ExecutionPlan
from scheduler.errors import listing
from scheduler.model.depth import check_value_depth
from somatize_tasks.catalog.entries import Catalog, catalog_names, params_problem
from somatize_tasks.errors import NodeParamsError, PlanInputError
from somatize_tasks.store import key_part


def check_run_inputs(
    plan: ExecutionPlan,
    params: Any,
    ops: Any,
    catalog: Catalog | None = None,
    *,
    wire: bool = False,
) -> None:
    """Raise :class:`PlanInputError` or :class:`NodeParamsError` unless ``params`` and
    ``ops`` fit ``plan`` (and ``catalog``'s signatures, where it holds the node).
    ``wire``: the parameters travel as JSON (a distributed run), so must encode."""
    known = set(plan.node_ids())
    for node_id in known:
        key_part(f"node id of plan node {node_id!r}", node_id)
    _check_shapes(params, ops)
    for what, mapping in (("params", params), ("ops", ops)):
        unknown = sorted(set(mapping or {}) - known)
        if unknown:
            raise PlanInputError(
                f"{what} names nodes the plan does not have: {listing(unknown, item_chars=60)}; "
                f"the plan's nodes are: {listing(sorted(known), item_chars=60)}"
            )
    if wire and params:
        _check_json("params", params)
    if catalog is not None:
        _check_signatures(params or {}, ops or {}, catalog)


def _check_shapes(params: Any, ops: Any) -> None:
    problems: list[str] = []
    if params is not None:
        if not isinstance(params, Mapping):
            raise PlanInputError(_not_mapping("params", params, "objects of keyword parameters"))
        for node_id, given in params.items():
            if not isinstance(given, Mapping):
                problems.append(
                    f"params for node {node_id!r} must be an object of keyword "
                    f"parameters, not {type(given).__name__}"
                )
            elif not all(isinstance(name, str) and name for name in given):
                bad = [name for name in given if not (isinstance(name, str) and name)]
                problems.append(
                    f"params for node {node_id!r}: parameter names must be "
                    f"non-empty strings, not {listing(map(repr, bad))}"
                )
    if ops is not None:
        if not isinstance(ops, Mapping):
            raise PlanInputError(_not_mapping("ops", ops, "catalog names"))
        problems += [
            f"ops for node {node_id!r} must be a catalog name, not {name!r}"[:200]
            for node_id, name in ops.items()
            if not (isinstance(name, str) and name)
        ]
    if problems:
        raise PlanInputError(listing(problems, sep="; "))


def _not_mapping(what: str, value: Any, of: str) -> str:
    return f"{what} must be an object mapping node ids to {of}, not {type(value).__name__}"


def _check_json(what: str, value: Any) -> None:
    """A value that travels in a message must be plain JSON."""
    check_value_depth(value, what)
    try:
        json.dumps(value, allow_nan=True)
    except (TypeError, ValueError) as exc:
        raise PlanInputError(f"{what} must be JSON data: {exc}") from None


def _check_signatures(params: Mapping[str, Any], ops: Mapping[str, str], catalog: Catalog) -> None:
    problems: list[str] = []
    for node_id, given in params.items():
        entry = next(
            (catalog.get(name) for name in catalog_names(node_id, ops) if name in catalog), None
        )
        problem = None if entry is None else params_problem(entry, given)
        if problem is not None:
            problems.append(f"node '{node_id}': {problem}")
    if problems:
        raise NodeParamsError(listing(problems, sep="; "))
