"""A small, independent model of a plan's data flow and requirements.

It reads the wire JSON directly (not the scheduler's models) and follows
DESIGN.md's runtime semantics, so the property tests can compute what the
scheduler should produce without calling its internals:

- a Sequence feeds each step's output into the next step;
- every branch of a Parallel, and every arm of a Branch, reads the input of
  its parent; what follows reads every branch's (arm's) terminal nodes;
- a Branch's own node reads the input too; a Step feeds its handoffs;
- Empty passes its input through; a Composite or Stream is read by its
  first node and answers with its last;
- a Loop's first pass reads the Loop's input; each later pass reads
  ``carry_from`` (without it, the Loop's input again, as in Soma), and what
  follows the Loop reads ``carry_from``, else the body's terminal nodes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

Edge = tuple[str, str]
_MARK = "\0input"


def variant(node: Any) -> tuple[str, Any]:
    if node == "Empty":
        return "Empty", None
    ((kind, body),) = node.items()
    return kind, body


def _dedup(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _flow(node: Any, inputs: list[str], edges: set[Edge]) -> list[str]:
    kind, body = variant(node)
    if kind == "Empty":
        return inputs
    if kind == "Execute":
        edges.update((i, body["node_id"]) for i in inputs)
        return [body["node_id"]]
    if kind in ("Composite", "Stream"):
        ids = body["node_ids"]
        edges.update((i, ids[0]) for i in inputs)
        return [ids[-1]]
    if kind == "Sequence":
        current = inputs
        for step in body:
            current = _flow(step, current, edges)
        return current
    if kind == "Parallel":
        if not body:
            return inputs
        return _dedup([o for branch in body for o in _flow(branch, inputs, edges)])
    if kind == "Step":
        edges.update((i, body["node_id"]) for i in inputs)
        outs = [body["node_id"]]
        for _, plan in body.get("handoffs", []):
            outs += _flow(plan, [body["node_id"]], edges)
        return _dedup(outs)
    if kind == "Branch":
        edges.update((i, body["node_id"]) for i in inputs)
        return _dedup([o for _, arm in body["arms"] for o in _flow(arm, inputs, edges)])
    if kind == "Remote":
        return _flow(body["plan"], inputs, edges)
    assert kind == "Loop"
    first = _flow(body["body"], inputs, edges)
    if not body.get("carry_from"):
        return first
    carried = [body["carry_from"]]
    scratch: set[Edge] = set()
    _flow(body["body"], [_MARK], scratch)
    entries = {target for source, target in scratch if source == _MARK}
    edges.update((c, e) for c in carried for e in entries if c != e)
    return carried


def data_edges(plan: Any) -> set[Edge]:
    """Every (producer, consumer) pair of node ids the plan's data flows along."""
    edges: set[Edge] = set()
    _flow(plan, [], edges)
    return edges


def exit_nodes(plan: Any) -> list[str]:
    """The nodes a plan's output comes from (what a following step reads)."""
    return _flow(plan, [], set())


def required_targets(plan: Any) -> dict[str, tuple[str, str]]:
    """node id -> the (kind, value) target of the innermost Remote around it."""
    out: dict[str, tuple[str, str]] = {}

    def walk(node: Any, target: tuple[str, str] | None) -> None:
        kind, body = variant(node)
        if kind == "Remote":
            ((tk, tv),) = body["target"].items()
            walk(body["plan"], (tk, tv))
            return
        for node_id in own_ids(node):
            if target is not None:
                out[node_id] = target
        for child in children(node):
            walk(child, target)

    walk(plan, None)
    return out


def own_ids(node: Any) -> list[str]:
    kind, body = variant(node)
    if kind in ("Execute", "Step", "Loop", "Branch"):
        return [body["node_id"]]
    if kind in ("Composite", "Stream"):
        return list(body["node_ids"])
    return []


def children(node: Any) -> list[Any]:
    kind, body = variant(node)
    if kind in ("Sequence", "Parallel"):
        return list(body)
    if kind == "Step":
        return [plan for _, plan in body.get("handoffs", [])]
    if kind == "Branch":
        return [plan for _, plan in body["arms"]]
    if kind == "Loop":
        return [body["body"]]
    if kind == "Remote":
        return [body["plan"]]
    return []


def all_ids(node: Any) -> Iterator[str]:
    """Node ids in Soma's order: own ids, then children's."""
    yield from own_ids(node)
    for child in children(node):
        yield from all_ids(child)


@dataclass
class ParallelSite:
    """An outermost Parallel (not inside another Parallel's branch)."""

    branch_targets: list[tuple[str, str] | None] = field(default_factory=list)
    has_nodes: bool = False


def outermost_parallels(plan: Any) -> list[ParallelSite]:
    """Outermost Parallels with at least one branch, in execution order, with the
    target each branch must satisfy (its own Remote's, else the enclosing one's)."""
    sites: list[ParallelSite] = []

    def walk(node: Any, target: tuple[str, str] | None) -> None:
        kind, body = variant(node)
        if kind == "Remote":
            ((tk, tv),) = body["target"].items()
            walk(body["plan"], (tk, tv))
            return
        if kind == "Parallel" and body:
            site = ParallelSite(has_nodes=any(True for _ in all_ids(node)))
            for branch in body:
                b_kind, b_body = variant(branch)
                if b_kind == "Remote":
                    ((tk, tv),) = b_body["target"].items()
                    site.branch_targets.append((tk, tv))
                else:
                    site.branch_targets.append(target)
            sites.append(site)
            return
        for child in children(node):
            walk(child, target)

    walk(plan, None)
    return sites


def satisfies(worker: dict[str, Any], target: tuple[str, str] | None) -> bool:
    if target is None:
        return True
    kind, value = target
    return value in worker["tags"] if kind == "Tag" else worker["id"] == value


def free_slots(worker: dict[str, Any]) -> int:
    return max(0, worker["max_concurrent"] - worker["active_jobs"])
