"""A fit run's states written as a Soma checkpoint bundle, which Soma's ``Graph.load`` reads.

``somatize-tasks states export RUN --bundle model.zip``: the run's nodes
with their classes (``class_path``, ``class_version``) and parameters
(``kwargs``), its data edges, and the states its fit learned, in the format
of :mod:`somatize_tasks.authoring.bundle`. A node's class is the one its op
names (``class:...``, a run of a bundle), else its catalog entry here: the
producer must hold the catalog (``--nodes``) to name the classes.

Soma's bundle holds a graph of Filters and nothing else: a plan with a Loop,
Branch or Step, or a node that runs a function, cannot be written as one
(export its states as a states file instead).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scheduler import Branch, Loop, Step, data_edges
from somatize_tasks.authoring.bundle import BundleNode, write_soma_bundle
from somatize_tasks.catalog.classes import parse_class_op
from somatize_tasks.catalog.entries import Catalog, catalog_names, default_catalog
from somatize_tasks.errors import BundleError
from somatize_tasks.runtime.producer.handle import PlanRun, RunDefinition


def export_soma_bundle(
    run: PlanRun, path: str | Path, catalog: Catalog | None = None
) -> dict[str, Any]:
    """Write ``run``'s topology and fitted states to ``path``; returns the states written."""
    definition = run.definition()
    states = run.states()
    if not states:
        raise BundleError(f"run {run.id} kept no states (was it run with mode fit?)")
    nodes = bundle_nodes(definition, catalog or default_catalog)
    ids = {n.id for n in nodes}
    plan = definition.document.plan
    edges = [(s, t) for s, t in data_edges(plan, definition.document.predecessors) if {s, t} <= ids]
    write_soma_bundle(path, nodes, edges, states)
    return states


def bundle_nodes(definition: RunDefinition, catalog: Catalog) -> list[BundleNode]:
    """Every node of the run as a bundle lists it, in the plan's order."""
    plan = definition.document.plan
    control = _control_nodes(plan.root)
    if control:
        raise BundleError(
            f"a Soma bundle holds a graph of filters; this run's plan has {control[0]}, "
            "which it cannot hold: export the states as a states file instead "
            "(states export RUN -o FILE)"
        )
    return [
        _node(node_id, definition.ops, definition.params.get(node_id, {}), catalog)
        for node_id in plan.node_ids()
    ]


def _node(
    node_id: str, ops: Mapping[str, str], params: dict[str, Any], catalog: Catalog
) -> BundleNode:
    names = catalog_names(node_id, ops)
    spec = parse_class_op(names[0])
    if spec is not None:
        path, version = spec
        return BundleNode(node_id, path, 1 if version is None else version, params)
    entry = next((catalog.get(n) for n in names if n in catalog), None)
    if entry is None:
        raise BundleError(
            f"node {node_id!r} runs catalog entry {names[-1]!r}, which this process's catalog "
            "lacks: import its module (--nodes MODULE) so its class can be named"
        )
    if entry.kind != "filter":
        raise BundleError(
            f"node {node_id!r} runs the function {entry.qualname}; a Soma bundle holds "
            "Filter classes only: export the states as a states file instead"
        )
    return BundleNode(node_id, entry.qualname, getattr(entry.target, "class_version", 1), params)


def _control_nodes(root: Any) -> list[str]:
    found, stack = [], [root]
    while stack:
        node = stack.pop()
        if isinstance(node, Loop | Branch | Step):
            found.append(f"{node.tag} '{node.node_id}'")
        stack.extend(node.children())
    return found
