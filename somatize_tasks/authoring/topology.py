"""A graph's nodes and data edges to an ExecutionPlan, as Soma's compiler plans it.

For a graph of plain filters (what a checkpoint bundle holds), Soma's
``Compiler::compile`` comes down to three steps, followed here:

1. ``Graph::topological_sort``: Kahn's algorithm over a stack, seeded with
   the roots in sorted order; each node's newly free successors go on top,
   smallest id first;
2. ``compute_levels``: a node's level is one more than its highest
   predecessor's (roots are level 0);
3. ``plan_subset``: the sorted nodes grouped by level (a level keeps the
   sorted order), one node -> ``Execute``, several -> ``Parallel`` of
   Executes, the levels in a ``Sequence`` (one level is itself, none is
   ``Empty``).

The predecessors are each node's edge sources in edge order (Soma's
``Graph::predecessors``), which is what a run reads inputs from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from somatize_tasks.errors import BundleError


def topological_order(node_ids: Sequence[str], edges: Sequence[tuple[str, str]]) -> list[str]:
    """Soma's ``Graph::topological_sort``; a :class:`BundleError` names a cycle's nodes."""
    degree = dict.fromkeys(node_ids, 0)
    successors: dict[str, list[str]] = {n: [] for n in node_ids}
    for source, target in edges:
        degree[target] = degree.get(target, 0) + 1
        successors.setdefault(source, []).append(target)
    stack = sorted(n for n, d in degree.items() if d == 0)
    ordered: list[str] = []
    while stack:
        node = stack.pop()
        ordered.append(node)
        freed = []
        for successor in successors.get(node, []):
            degree[successor] -= 1
            if degree[successor] == 0:
                freed.append(successor)
        stack.extend(sorted(freed, reverse=True))  # smallest on top: taken first
    if len(ordered) != len(degree):
        stuck = sorted(set(degree) - set(ordered))
        raise BundleError(
            f"the graph's edges form a cycle through {', '.join(stuck[:5])}"
            + (f" and {len(stuck) - 5} more" if len(stuck) > 5 else "")
        )
    return ordered


def predecessors_of(
    node_ids: Sequence[str], edges: Sequence[tuple[str, str]]
) -> dict[str, list[str]]:
    """Each node's predecessors in edge order, each once (none: it reads the run's input)."""
    preds: dict[str, list[str]] = {n: [] for n in node_ids}
    for source, target in edges:
        if source not in preds[target]:
            preds[target].append(source)
    return preds


def plan_of_graph(node_ids: Sequence[str], edges: Sequence[tuple[str, str]]) -> Any:
    """The plan (serde wire form) Soma's compiler writes for this graph of filters."""
    ordered = topological_order(node_ids, edges)
    preds = predecessors_of(node_ids, edges)
    level: dict[str, int] = {}
    for node in ordered:
        level[node] = max((level[p] + 1 for p in preds[node]), default=0)
    by_level: dict[int, list[str]] = {}
    for node in ordered:
        by_level.setdefault(level[node], []).append(node)
    steps = [_level_plan(by_level[lvl]) for lvl in sorted(by_level)]
    if not steps:
        return "Empty"
    return steps[0] if len(steps) == 1 else {"Sequence": steps}


def _level_plan(nodes: list[str]) -> Any:
    executes = [{"Execute": {"node_id": n}} for n in nodes]
    return executes[0] if len(executes) == 1 else {"Parallel": executes}
