"""One function per plan variant: what a user calls to build a plan in Python.

``op`` is the only one a plain sequence or fork needs (the operators do the
rest); the others build the variants that carry more than nodes: a loop's
cap and stop signal, a branch's arms, a step's handoffs, a remote target,
a stream's chunk size, a composite block.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from somatize_tasks.authoring.pieces import (
    BranchPiece,
    CompositePiece,
    EmptyPiece,
    LoopPiece,
    Op,
    Piece,
    PieceLike,
    RemotePiece,
    StepPiece,
    StreamPiece,
    as_op,
    as_piece,
)
from somatize_tasks.errors import PlanBuildError


def op(node: Any, /, *, id: str | None = None, **params: Any) -> Op:
    """One node: a catalog function or Filter class (registered with ``@node``), or a
    node id. ``id`` chooses the node's id (the catalog name by default; Soma numbers a
    repeat ``_2``, ``_3``, ...); the other keywords are the node's parameters."""
    return as_op(node, id, params)


def loop(
    node_id: str,
    body: PieceLike,
    *,
    until: PieceLike | bool | None = None,
    max_iterations: int | None = None,
    carry_from: PieceLike | bool | None = None,
) -> LoopPiece:
    """Repeat ``body`` (Soma's ``Graph.loop``).

    ``until``: the node whose output says stop (``True``, ``"done"``, ...); by default
    the body's single terminal node, as Soma's compiler resolves it; ``False`` ignores
    signals and runs ``max_iterations`` passes. ``max_iterations``: the cap (None:
    Soma's 100). ``carry_from``: the node whose output the next pass starts from; by
    default the body's single terminal, as in Soma; ``False``: every pass starts from
    the loop's input.
    """
    if not isinstance(node_id, str) or not node_id:
        raise PlanBuildError("loop(node_id, ...): the loop's id must be a non-empty string")
    if max_iterations is not None and (
        isinstance(max_iterations, bool) or not isinstance(max_iterations, int)
    ):
        raise PlanBuildError(f"loop '{node_id}': max_iterations must be an int or None")
    if max_iterations is not None and max_iterations < 0:
        raise PlanBuildError(f"loop '{node_id}': max_iterations must be 0 or more")
    if until is True:
        until = None
    if carry_from is True:
        carry_from = None
    return LoopPiece(node_id, as_piece(body), max_iterations, _ref(until), _ref(carry_from))


def branch(condition: Any, arms: Mapping[Any, PieceLike]) -> BranchPiece:
    """Run ``condition``, then only the arm its output names (Soma's ``Graph.branch``).

    ``arms`` maps labels to plans; a bool key is the label ``"true"``/``"false"``, as
    a bool selector reads. The chosen arm receives the branch's input.
    """
    if not arms:
        raise PlanBuildError("branch(...) needs at least one arm")
    return BranchPiece(
        as_op(condition), tuple((_label(label), as_piece(arm)) for label, arm in arms.items())
    )


def step(node: Any, handoffs: Mapping[str, PieceLike] | Iterable[PieceLike] = ()) -> StepPiece:
    """A node that may hand control to one of ``handoffs`` (``Handoff(target, value)``).

    ``handoffs`` maps each target label to its plan, or lists plans, each labelled
    with its first node's id (Soma's handoff targets are node ids).
    """
    pairs: list[tuple[str | None, Piece]]
    if isinstance(handoffs, Mapping):
        pairs = [(_label(label), as_piece(plan)) for label, plan in handoffs.items()]
    else:
        pairs = [(None, as_piece(plan)) for plan in handoffs]
    return StepPiece(as_op(node), tuple(pairs))


def remote(plan: PieceLike, *, tag: str | None = None, worker: str | None = None) -> RemotePiece:
    """Run ``plan`` on a worker with ``tag``, or on the worker ``worker`` (exactly one)."""
    if (tag is None) == (worker is None):
        raise PlanBuildError("remote(...) takes exactly one of tag= or worker=")
    for name, value in (("tag", tag), ("worker", worker)):
        if value is not None and (not isinstance(value, str) or not value):
            raise PlanBuildError(f"remote(..., {name}=...) must be a non-empty string")
    return RemotePiece(as_piece(plan), tag, worker)


def stream(*nodes: Any, chunk_size: int) -> StreamPiece:
    """Apply ``nodes`` chunk by chunk, ``chunk_size`` rows at a time (forward runs)."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size <= 0:
        raise PlanBuildError(f"stream(...): chunk_size must be a positive int, not {chunk_size!r}")
    return StreamPiece(_ops("stream", nodes), chunk_size)


def composite(*nodes: Any) -> CompositePiece:
    """Run ``nodes`` as one block in one task, passing values in memory."""
    return CompositePiece(_ops("composite", nodes))


def empty() -> EmptyPiece:
    """Soma's ``Empty``: nothing runs; what follows reads what came before."""
    return EmptyPiece()


def _ops(what: str, nodes: tuple[Any, ...]) -> tuple[Op, ...]:
    if not nodes:
        raise PlanBuildError(f"{what}(...) needs at least one node")
    return tuple(as_op(n) for n in nodes)


def _ref(value: Any) -> Any:
    """A node reference: None and False stay; anything else names one node."""
    if value is None or value is False:
        return value
    piece = as_piece(value)
    if not isinstance(piece, Op):
        raise PlanBuildError(f"{value!r} names no single node (a loop refers to one node)")
    return piece


def _label(label: Any) -> str:
    if isinstance(label, bool):
        return "true" if label else "false"
    if not isinstance(label, str) or not label:
        raise PlanBuildError(f"an arm or handoff label must be a non-empty string, not {label!r}")
    return label
