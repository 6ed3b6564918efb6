"""Checks on a whole plan that a per-field schema cannot make.

Node ids must be unique across the whole plan (the artifact store, the
distribution and the run state are all keyed by them); a Branch's labels must
be unique (a label picks exactly one arm); a Loop's ``until.node`` and
``carry_from`` must name nodes of the plan; and a plan may nest at most ``MAX_DEPTH``
variants deep (Soma's JSON reader, serde_json, stops at 128 levels of JSON,
two or more per variant, and so does the writer here). One walk, linear in
the plan's size.
"""

from __future__ import annotations

from scheduler.errors import FieldProblem
from scheduler.model.notices import summarize
from scheduler.model.plan_nodes import Branch, Loop, Parallel, PlanNode, Remote, Sequence, Step

MAX_DEPTH = 64


def structural_problems(root: PlanNode, notes: list[str] | None = None) -> list[FieldProblem]:
    """Every structural problem of the plan rooted at ``root``, in walk order; the
    plan's warnings (:mod:`scheduler.model.notices`) go to ``notes`` in the same walk."""
    problems: list[FieldProblem] = []
    unknown: dict[str, None] = {}
    first_seen: dict[str, str] = {}
    loops: list[tuple[Loop, str]] = []
    stack: list[tuple[PlanNode, str, int]] = [(root, "", 1)]
    while stack:
        node, path, depth = stack.pop()
        here = f"{path}.{node.tag}" if path else node.tag
        if depth > MAX_DEPTH:
            problems.append(
                FieldProblem(here, f"the plan nests more than {MAX_DEPTH} variants deep")
            )
            continue
        for node_id in node.own_ids():
            if node_id in first_seen:
                problems.append(
                    FieldProblem(
                        here,
                        f"node id '{node_id}' is used twice (first at {first_seen[node_id]}); "
                        "node ids must be unique across the whole plan",
                    )
                )
            else:
                first_seen[node_id] = here
        if node.__pydantic_extra__:
            unknown.update((f"{node.tag}.{name}", None) for name in node.__pydantic_extra__)
        if isinstance(node, Branch):
            problems.extend(_duplicate_labels(node, here))
        if isinstance(node, Loop):
            loops.append((node, here))
        if isinstance(node, Step):
            problems.extend(_duplicate_handoffs(node, here))
        stack.extend(
            (child, child_path, depth + 1)
            for child, child_path in reversed(_children_with_paths(node, here))
        )
    known = set(first_seen)
    for loop, here in loops:
        problems.extend(_loop_problems(loop, here, known))
    if notes is not None:
        notes.extend(summarize(unknown, [loop for loop, _ in loops]))
    return problems


def _children_with_paths(node: PlanNode, here: str) -> list[tuple[PlanNode, str]]:
    if isinstance(node, Sequence | Parallel):
        return [(child, f"{here}[{i}]") for i, child in enumerate(node.children())]
    if isinstance(node, Branch):
        return [(plan, f"{here}.arms[{i}]") for i, (_, plan) in enumerate(node.arms)]
    if isinstance(node, Step):
        return [(plan, f"{here}.handoffs[{i}]") for i, (_, plan) in enumerate(node.handoffs)]
    if isinstance(node, Loop):
        return [(node.body, f"{here}.body")]
    if isinstance(node, Remote):
        return [(node.plan, f"{here}.plan")]
    return []


def _duplicate_labels(node: Branch, here: str) -> list[FieldProblem]:
    seen: set[str] = set()
    problems = []
    for i, label in enumerate(node.labels()):
        if label in seen:
            problems.append(
                FieldProblem(
                    f"{here}.arms[{i}]",
                    f"Branch '{node.node_id}' has two arms labelled '{label}'",
                )
            )
        seen.add(label)
    return problems


def _duplicate_handoffs(node: Step, here: str) -> list[FieldProblem]:
    seen: set[str] = set()
    problems = []
    for i, (label, _) in enumerate(node.handoffs):
        if label in seen:
            problems.append(
                FieldProblem(
                    f"{here}.handoffs[{i}]",
                    f"Step '{node.node_id}' declares handoff '{label}' twice",
                )
            )
        seen.add(label)
    return problems


def _loop_problems(node: Loop, here: str, known: set[str]) -> list[FieldProblem]:
    """A Loop's references must name nodes of the plan (Soma's compiler puts them in
    the body; a hand-written plan may read any node's latest value, as Soma does)."""
    problems = []
    if node.until.type == "WhenSignaled" and node.until.node not in known:
        problems.append(
            FieldProblem(
                f"{here}.until.node",
                f"Loop '{node.node_id}' waits for a signal from '{node.until.node}', "
                "which is not a node of the plan",
            )
        )
    if node.carry_from is not None and node.carry_from not in known:
        problems.append(
            FieldProblem(
                f"{here}.carry_from",
                f"Loop '{node.node_id}' carries from '{node.carry_from}', "
                "which is not a node of the plan",
            )
        )
    return problems
