"""Pieces to a plan document: Soma's ids, serde's JSON, and the data graph.

One walk over the pieces, in the order Soma's ``node_ids()`` lists a plan
(a variant's own ids first, then its children), gives every node its id the
way Soma's ``Graph.node`` does (``free_id``: the wanted id, else ``_2``,
``_3``, ...), writes each variant in serde's wire form and draws the data
edges (``a >> b``: ``b`` reads ``a``; a fork's branches read what came
before it; what follows a fork reads every branch).

The result is checked by the same code that loads a JSON plan
(:func:`scheduler.load_plan_document`), so a built plan and the same plan
written as JSON are one document. The data graph is written as the
document's ``predecessors`` when the plan is a graph of nodes (no Loop,
Branch or Step, whose data follow the plan's shape): a run then reads each
node's input from its predecessors, as Soma's executor does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from scheduler import ExecutionPlan, PlanDocument, load_plan_document
from somatize_tasks.authoring.pieces import (
    BranchPiece,
    Chain,
    CompositePiece,
    EmptyPiece,
    Fork,
    LoopPiece,
    Op,
    Piece,
    PieceLike,
    RemotePiece,
    StepPiece,
    StreamPiece,
    as_piece,
)
from somatize_tasks.catalog.entries import Catalog, catalog_names, default_catalog
from somatize_tasks.errors import PlanBuildError

Wire = Any
EMPTY = "Empty"


@dataclass(frozen=True)
class BuiltPlan:
    """A plan built in Python: the document a run takes, and its nodes' parameters
    and catalog names (``ops``, only where a node id does not name its entry)."""

    document: PlanDocument
    params: dict[str, dict[str, Any]] = field(default_factory=dict)
    ops: dict[str, str] = field(default_factory=dict)

    @property
    def plan(self) -> ExecutionPlan:
        return self.document.plan

    @property
    def predecessors(self) -> dict[str, list[str]] | None:
        return self.document.predecessors

    def node_ids(self) -> list[str]:
        return self.plan.node_ids()

    def to_wire(self) -> Any:
        """The plan document as JSON data: a bare plan, or ``{"plan", "predecessors"}``."""
        return self.document.to_wire()

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_wire(), indent=indent)


def build(
    piece: PieceLike, *, graph: bool | None = None, catalog: Catalog | None = None
) -> BuiltPlan:
    """The plan ``piece`` describes (anything :func:`as_piece` takes).

    ``graph``: write the data graph as ``predecessors``: by default when the plan
    has no Loop, Branch or Step; ``False`` writes a bare plan; ``True`` insists
    (an error for a plan with control flow). ``catalog`` finds the names of
    functions and classes (the default catalog by default).
    """
    walk = _Walk(catalog or default_catalog)
    wire, _ = walk.plan(as_piece(piece), [])
    if graph and walk.control:
        raise PlanBuildError(
            f"graph=True: the plan has a {walk.control}, whose data follow the plan's "
            "shape; build it without graph=True"
        )
    with_graph = bool(walk.preds) and (not walk.control if graph is None else graph)
    document: Any = {"plan": wire, "predecessors": walk.preds} if with_graph else wire
    return BuiltPlan(load_plan_document(document), walk.params, walk.ops)


class _Walk:
    """One build: the ids given so far, and what the plan's nodes carry."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.used: set[str] = set()
        self.order: list[str] = []  # ids in the order given: Soma's node_ids() order
        self.ids_of_op: dict[int, list[str]] = {}
        self.ids_of_target: dict[int, list[str]] = {}
        self.names: dict[int, str] = {}
        self.params: dict[str, dict[str, Any]] = {}
        self.ops: dict[str, str] = {}
        self.preds: dict[str, list[str]] = {}
        self.control = ""  # the first Loop/Branch/Step met, for errors

    # --- ids ---------------------------------------------------------------------------

    def free_id(self, wanted: str) -> str:
        """Soma's ``free_id``: ``wanted``, else the first free ``wanted_2``, ``wanted_3``..."""
        candidate, number = wanted, 2
        while candidate in self.used:
            candidate, number = f"{wanted}_{number}", number + 1
        self.used.add(candidate)
        self.order.append(candidate)
        return candidate

    def node(self, op: Op, sources: list[str]) -> str:
        name = self.catalog_name(op)
        node_id = self.free_id(op.base_id or name)
        self.ids_of_op.setdefault(id(op), []).append(node_id)
        if op.target is not None:
            self.ids_of_target.setdefault(id(op.target), []).append(node_id)
            found = next((n for n in catalog_names(node_id, {}) if n in self.catalog), None)
            if found != name:
                self.ops[node_id] = name
        if op.params:
            self.params[node_id] = dict(op.params)
        self.preds[node_id] = list(sources)
        return node_id

    def catalog_name(self, op: Op) -> str:
        if op.target is None:
            return op.base_id
        key = id(op.target)
        if key not in self.names:
            name = self.catalog.name_of(op.target)
            if name is None:
                what = getattr(op.target, "__qualname__", repr(op.target))
                raise PlanBuildError(
                    f"{what} is not a registered node: decorate it with @node (or "
                    "@node('name')) in a module the workers load with --nodes, or give "
                    "its node id as a string"
                )
            self.names[key] = name
        return self.names[key]

    def ref(self, value: Any, what: str) -> str | None:
        """The id a loop's ``until``/``carry_from`` names (None: none)."""
        if value is None or value is False:
            return None
        assert isinstance(value, Op)
        found = self.ids_of_op.get(id(value)) or (
            self.ids_of_target.get(id(value.target)) if value.target is not None else None
        )
        if found is None and value.target is None:
            return value.base_id  # an id written as text: the plan's checks judge it
        if not found or len(found) > 1:
            many = f"is used {len(found)} times ({', '.join(found)})" if found else "is not in it"
            raise PlanBuildError(
                f"{what}: {value.base_id or self.catalog_name(value)} {many}; name the node "
                "by its id, as text"
            )
        return found[0]

    # --- variants ----------------------------------------------------------------------

    def plan(self, piece: Piece, sources: list[str]) -> tuple[Wire, list[str]]:
        """``piece`` in wire form, and the nodes whose outputs what follows reads."""
        if isinstance(piece, Op):
            node_id = self.node(piece, sources)
            return {"Execute": {"node_id": node_id}}, [node_id]
        if isinstance(piece, Chain):
            return self.chain(piece, sources)
        if isinstance(piece, Fork):
            return self.fork(piece, sources)
        if isinstance(piece, StreamPiece | CompositePiece):
            return self.block(piece, sources)
        if isinstance(piece, RemotePiece):
            return self.remote(piece, sources)
        if isinstance(piece, EmptyPiece):
            return EMPTY, list(sources)
        return self.controlled(piece, sources)

    def chain(self, piece: Chain, sources: list[str]) -> tuple[Wire, list[str]]:
        steps, current = [], list(sources)
        for step in piece.steps:
            wire, current = self.plan(step, current)
            if wire != EMPTY:
                steps.append(wire)
        return _collapse("Sequence", steps), current

    def fork(self, piece: Fork, sources: list[str]) -> tuple[Wire, list[str]]:
        branches, exits = [], []
        for branch in piece.branches:
            wire, ends = self.plan(branch, sources)
            exits += ends
            if wire != EMPTY:
                branches.append(wire)
        return _collapse("Parallel", branches), exits

    def block(
        self, piece: StreamPiece | CompositePiece, sources: list[str]
    ) -> tuple[Wire, list[str]]:
        ids, current = [], list(sources)
        for op in piece.nodes:
            ids.append(self.node(op, current))
            current = [ids[-1]]
        if isinstance(piece, StreamPiece):
            return {"Stream": {"node_ids": ids, "chunk_size": piece.chunk_size}}, current
        return {"Composite": {"node_ids": ids}}, current

    def remote(self, piece: RemotePiece, sources: list[str]) -> tuple[Wire, list[str]]:
        first = len(self.order)
        wire, exits = self.plan(piece.inner, sources)
        if len(self.order) == first:
            raise PlanBuildError("remote(...) of a plan with no node: nothing would run there")
        target = {"Tag": piece.tag} if piece.tag is not None else {"WorkerId": piece.worker}
        return {"Remote": {"node_id": self.order[first], "target": target, "plan": wire}}, exits

    def controlled(self, piece: Piece, sources: list[str]) -> tuple[Wire, list[str]]:
        if isinstance(piece, LoopPiece):
            self.control = self.control or f"loop '{piece.node_id}'"
            return self.loop(piece, sources)
        if isinstance(piece, BranchPiece):
            self.control = self.control or "branch"
            condition = self.node(piece.condition, sources)
            arms, exits = self.arms(piece.arms, condition)
            return {"Branch": {"node_id": condition, "arms": arms}}, exits
        if isinstance(piece, StepPiece):
            self.control = self.control or "step"
            node_id = self.node(piece.node, sources)
            handoffs, exits = self.arms(piece.handoffs, node_id)
            body: dict[str, Any] = {"node_id": node_id}
            if handoffs:
                body["handoffs"] = handoffs
            return {"Step": body}, exits if handoffs else [node_id]
        raise PlanBuildError(f"{piece!r} is not a plan piece")

    def arms(
        self, pairs: tuple[tuple[str | None, Piece], ...], owner: str
    ) -> tuple[list[Any], list[str]]:
        arms, exits = [], []
        for given, arm in pairs:
            first = len(self.order)
            wire, ends = self.plan(arm, [owner])
            if given is None and len(self.order) == first:
                raise PlanBuildError(f"a handoff of '{owner}' has no node to be named by")
            arms.append([self.order[first] if given is None else given, wire])
            exits += ends
        return arms, exits

    def loop(self, piece: LoopPiece, sources: list[str]) -> tuple[Wire, list[str]]:
        node_id = self.free_id(piece.node_id)
        self.preds[node_id] = list(sources)
        body, exits = self.plan(piece.body, [node_id])
        terminal = exits[0] if len(exits) == 1 and exits[0] != node_id else None
        until: dict[str, str | None]
        if piece.until is False:
            until = {"type": "Exhaust"}
        elif piece.until is None:
            if terminal is None:
                raise PlanBuildError(
                    f"loop '{node_id}' stops on its body's terminal node, but the body has "
                    f"{len(exits)} ({', '.join(exits)}); name the one that decides with "
                    "until=..., or until=False to run max_iterations passes"
                )
            until = {"type": "WhenSignaled", "node": terminal}
        else:
            until = {"type": "WhenSignaled", "node": self.ref(piece.until, f"loop '{node_id}'")}
        carry = (
            terminal
            if piece.carry_from is None
            else self.ref(piece.carry_from, f"loop '{node_id}' carry_from")
        )
        wire = {
            "Loop": {
                "node_id": node_id,
                "body": body,
                "max_iterations": piece.max_iterations,
                "until": until,
                "carry_from": carry,
            }
        }
        return wire, exits


def _collapse(tag: str, items: list[Wire]) -> Wire:
    """Soma's ``simplify``: no item is Empty, one item is itself."""
    if not items:
        return EMPTY
    return items[0] if len(items) == 1 else {tag: items}
