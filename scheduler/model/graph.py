"""A plan with its data edges: ``{"plan": <ExecutionPlan>, "predecessors": {...}}``.

Soma's executor reads a node's input from its graph predecessors (the
compiler's graph, ``GraphInfo``), not from the plan's shape. A plan document
may carry that graph; when it does, runs resolve inputs from it and the
scheduler draws its data transfers from it. A bare plan is still a valid
document (``predecessors`` is then None, and data follows the plan's shape).

Validation is what Soma's compiler guarantees and a hand-written graph may
not: every id is a node of the plan, and every predecessor can have run
before its node: earlier in a Sequence, the Loop/Branch/Step around it
(control edges), or later in the same Loop body (a back edge, read from the
previous pass). A predecessor in a sibling Parallel branch, in another arm
of a Branch, or after its node outside any loop (a cycle outside a loop)
is an error naming both nodes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.errors import FieldProblem, PlanValidationError
from scheduler.model.depth import check_text_depth, decode_json_text
from scheduler.model.plan import (
    VARIANT_TAGS,
    Branch,
    Composite,
    Execute,
    ExecutionPlan,
    Loop,
    PlanNode,
    Step,
    Stream,
    load_plan,
)

Predecessors = dict[str, list[str]]

#: A node's place in the plan tree: (container id, container kind, child slot,
#: container's own node id or "") from the root down. Slot -1 is a container's
#: own id (a Loop, Branch or Step node), before its children.
_Place = tuple[tuple[int, str, int, str], ...]


@dataclass(frozen=True)
class PlanDocument:
    """An execution plan and, optionally, the graph its data flows along."""

    plan: ExecutionPlan
    predecessors: Predecessors | None = None

    def to_wire(self) -> Any:
        """The document as JSON: a bare plan when there is no graph."""
        if self.predecessors is None:
            return self.plan.to_wire()
        return {"plan": self.plan.to_wire(), "predecessors": self.predecessors}


def is_document(value: Any) -> bool:
    """Whether a parsed JSON value is the ``{"plan": ...}`` form, not a bare plan."""
    return (
        isinstance(value, dict)
        and "plan" in value
        and not (len(value) == 1 and next(iter(value)) in VARIANT_TAGS)
    )


def load_plan_document(document: Any, predecessors: Any = None) -> PlanDocument:
    """A :class:`PlanDocument` from a bare plan or the ``{"plan", "predecessors"}`` form.

    ``predecessors`` given here overrides the document's own. Raises
    :class:`PlanValidationError` naming every bad field.
    """
    if isinstance(document, PlanDocument):
        document, given = document.plan, document.predecessors
        predecessors = given if predecessors is None else predecessors
    parsed = isinstance(document, str | bytes | bytearray) and document not in VARIANT_TAGS
    if parsed:
        document = _parse(document)
    if is_document(document):
        extra = sorted(set(document) - {"plan", "predecessors"})
        if extra:
            problem = FieldProblem(
                extra[0], "unknown field of a plan document (expected 'plan' and 'predecessors')"
            )
            raise PlanValidationError("plan document", [problem])
        if predecessors is None:
            predecessors = document.get("predecessors")
        document = document["plan"]
    plan = (
        ExecutionPlan.model_validate(document)
        if parsed or isinstance(document, str)
        else load_plan(document)
    )
    if predecessors is None:
        return PlanDocument(plan)
    graph = _read_predecessors(predecessors)
    check_predecessors(plan, graph)
    return PlanDocument(plan, graph)


def _parse(data: str | bytes | bytearray) -> Any:
    text = decode_json_text(data)
    check_text_depth(text)  # json.loads recurses once per level
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanValidationError("plan", [FieldProblem("", f"Invalid JSON: {exc}")]) from None


def _read_predecessors(raw: Any) -> Predecessors:
    if not isinstance(raw, Mapping):
        problem = FieldProblem(
            "predecessors",
            f"must be an object mapping node ids to lists of node ids, not {type(raw).__name__}",
        )
        raise PlanValidationError("plan document", [problem])
    graph: Predecessors = {}
    problems = []
    for node_id, preds in raw.items():
        ok = isinstance(preds, list) and all(isinstance(p, str) and p for p in preds)
        if not ok:
            problems.append(FieldProblem(f"predecessors.{node_id}", "must be a list of node ids"))
            continue
        graph[str(node_id)] = list(preds)
    _raise_if(problems)
    return graph


def check_predecessors(plan: ExecutionPlan, graph: Mapping[str, list[str]]) -> None:
    """Raise :class:`PlanValidationError` unless every edge can carry data at run time."""
    places = _places(plan.root)
    problems: list[FieldProblem] = []
    for node_id, preds in graph.items():
        if node_id not in places:
            problems.append(
                FieldProblem(f"predecessors.{node_id}", f"'{node_id}' is not a node of the plan")
            )
            continue
        for index, pred in enumerate(preds):
            why = _edge_problem(pred, node_id, places)
            if why is not None:
                problems.append(FieldProblem(f"predecessors.{node_id}[{index}]", why))
    _raise_if(problems)


def _raise_if(problems: list[FieldProblem]) -> None:
    if not problems:
        return
    raise PlanValidationError("plan document", problems)  # the message lists the first few


def _edge_problem(pred: str, node_id: str, places: dict[str, _Place]) -> str | None:
    """Why ``pred`` cannot feed ``node_id``, or None when it can."""
    if pred not in places:
        return f"'{pred}' (a predecessor of '{node_id}') is not a node of the plan"
    here, there = places[node_id], places[pred]
    depth = 0
    while depth < min(len(here), len(there)) and here[depth] == there[depth]:
        depth += 1
    in_loop = any(kind == "Loop" and slot == 0 for _, kind, slot, _ in here[:depth])
    if pred == node_id:
        return None if in_loop else f"'{node_id}' cannot be its own predecessor outside a loop"
    if depth == len(here) or depth == len(there):  # Composite/Stream ids share a place
        return None
    (_, kind, node_slot, owner), (_, _, pred_slot, _) = here[depth], there[depth]
    if kind == "Parallel":
        return (
            f"'{pred}' runs in another parallel branch than '{node_id}'; "
            "a branch never sees its siblings' outputs"
        )
    if kind in ("Branch", "Step") and pred_slot >= 0 and node_slot >= 0:
        return (
            f"'{pred}' and '{node_id}' are in different arms of '{kind}' "
            f"'{owner}'; only one arm runs"
        )
    if pred_slot < node_slot or in_loop:
        return None
    return f"'{pred}' runs after '{node_id}' and no loop repeats both (a cycle outside a loop)"


def _places(root: PlanNode) -> dict[str, _Place]:
    """Every node id's place in the tree (see :data:`_Place`); linear in the plan."""
    places: dict[str, _Place] = {}
    stack: list[tuple[PlanNode, _Place]] = [(root, ())]
    while stack:
        node, place = stack.pop()
        uid, kind = id(node), node.tag
        if isinstance(node, Execute):
            places[node.node_id] = place
        elif isinstance(node, Composite | Stream):
            for slot, node_id in enumerate(node.node_ids_):
                places[node_id] = (*place, (uid, kind, slot, ""))
        else:
            owner = node.node_id if isinstance(node, Loop | Branch | Step) else ""
            if owner:
                places[owner] = (*place, (uid, kind, -1, owner))
            stack.extend(
                (child, (*place, (uid, kind, slot, owner)))
                for slot, child in enumerate(node.children())
            )
    return places


def graph_edges(graph: Mapping[str, list[str]]) -> list[tuple[str, str]]:
    """The (producer, consumer) pairs of a predecessors graph, each once."""
    return list(dict.fromkeys((pred, node) for node, preds in graph.items() for pred in preds))
