"""What a run is given, whatever form the plan came in: one function, :func:`run_parts`.

``submit_plan`` and ``run_local`` (and so every command) take a plan as JSON
text, parsed JSON, a :class:`~scheduler.PlanDocument`, a piece built in
Python, a :class:`BuiltPlan`, or a Soma checkpoint bundle (a path to
``model.zip`` or a :class:`~somatize_tasks.authoring.bundle.SomaBundle`).
The last three carry more than a plan: their nodes' parameters and catalog
names, and a bundle its states. Parameters and ops given to the call win,
node by node, over the plan's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from somatize_tasks.authoring.build import BuiltPlan, build
from somatize_tasks.authoring.bundle import SomaBundle, is_bundle_path, read_soma_bundle
from somatize_tasks.authoring.pieces import Piece
from somatize_tasks.catalog.entries import Catalog

Params = Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True)
class RunParts:
    """A plan document and what goes with it; ``states`` is a bundle's (None: none)."""

    document: Any
    params: Params | None
    ops: Mapping[str, str] | None
    states: dict[str, Any] | None = None


def run_parts(
    plan: Any,
    params: Params | None = None,
    ops: Mapping[str, str] | None = None,
    catalog: Catalog | None = None,
) -> RunParts:
    """Split ``plan`` into its document and the params, ops and states it carries."""
    if isinstance(plan, Piece):
        plan = build(plan, catalog=catalog)
    if is_bundle_path(plan):
        plan = read_soma_bundle(plan)
    if isinstance(plan, SomaBundle):
        built = plan.built()
        return RunParts(
            built.document,
            merge_params(built.params, params),
            {**built.ops, **(ops or {})},
            dict(plan.states),
        )
    if isinstance(plan, BuiltPlan):
        return RunParts(
            plan.document, merge_params(plan.params, params), {**plan.ops, **(ops or {})} or None
        )
    return RunParts(plan, params, ops)


def merge_params(own: Params, given: Any) -> Any:
    """The plan's parameters, updated node by node (and key by key) with ``given``.

    Malformed ``given`` parameters are passed on as they are: the run's own checks
    (:func:`~somatize_tasks.runtime.compile.inputs.check_run_inputs`) name the problem.
    """
    if given is not None and not isinstance(given, Mapping):
        return given
    merged: dict[str, Any] = {node_id: dict(values) for node_id, values in own.items()}
    for node_id, values in (given or {}).items():
        if isinstance(values, Mapping) and isinstance(merged.get(node_id), dict):
            merged[node_id].update(values)
        else:
            merged[node_id] = values
    return merged or None
