"""The pieces a plan is built from, and the operators a Soma user already knows.

A piece describes a part of a plan without numbering its nodes yet (as
Soma's lazy ``Chain`` and ``Fork`` do): ids are given when the whole plan is
built (:mod:`somatize_tasks.authoring.build`), so a repeated node becomes
``inc``, ``inc_2``, ... in the order Soma's ``Graph.somatize`` would meet it.

- ``a >> b`` (or ``a.to(b)``): a sequence, ``b`` reads ``a``'s output;
- ``a.to([b, c])`` (or ``a >> (b | c)``): a fork, both read ``a``'s output;
- ``.collect(d)`` after a fork: ``d`` reads every branch's output.

Only the leftmost piece must be a piece (``op(load) >> normalize``): the
others may be catalog functions, Filter classes or node ids, and a list
on the right is a fork.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeAlias

from somatize_tasks.errors import PlanBuildError

#: What a piece may be given as: a piece, a catalog function or Filter class, a node
#: id, or a list (a fork).
PieceLike: TypeAlias = Any


class Piece:
    """Common operators of every piece (see the module docstring)."""

    def __rshift__(self, other: PieceLike) -> Chain:
        return Chain((*_steps(self), *_steps(as_piece(other))))

    def __rrshift__(self, other: PieceLike) -> Chain:
        return Chain((*_steps(as_piece(other)), *_steps(self)))

    def __or__(self, other: PieceLike) -> Fork:
        return Fork((*_branches(self), *_branches(as_piece(other))))

    def __ror__(self, other: PieceLike) -> Fork:
        return Fork((*_branches(as_piece(other)), *_branches(self)))

    def to(self, other: PieceLike) -> Chain:
        """Soma's ``.to``: what follows this piece (a list is a fork)."""
        return self.__rshift__(other)

    def collect(self, other: PieceLike) -> Chain:
        """Soma's ``.collect``: the node that reads every branch of the fork before it."""
        return self.__rshift__(other)


@dataclass(frozen=True, eq=False)
class Op(Piece):
    """One node: a catalog function or Filter class (``target``), or a node id.

    ``base_id`` is the id Soma would give it before numbering; ``params`` its
    keyword parameters for the run.
    """

    base_id: str
    target: Any = None
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class Chain(Piece):
    steps: tuple[Piece, ...]


@dataclass(frozen=True, eq=False)
class Fork(Piece):
    branches: tuple[Piece, ...]


@dataclass(frozen=True, eq=False)
class LoopPiece(Piece):
    """``until``: None (the body's single terminal signals, as Soma resolves it),
    False (run ``max_iterations`` passes), or the node that signals.
    ``carry_from``: None (the body's single terminal, as Soma), False (none), or a node."""

    node_id: str
    body: Piece
    max_iterations: int | None
    until: Any
    carry_from: Any


@dataclass(frozen=True, eq=False)
class BranchPiece(Piece):
    condition: Op
    arms: tuple[tuple[str, Piece], ...]


@dataclass(frozen=True, eq=False)
class StepPiece(Piece):
    """``handoffs``: (label, plan); a None label is the plan's first node id."""

    node: Op
    handoffs: tuple[tuple[str | None, Piece], ...]


@dataclass(frozen=True, eq=False)
class RemotePiece(Piece):
    inner: Piece
    tag: str | None
    worker: str | None


@dataclass(frozen=True, eq=False)
class StreamPiece(Piece):
    nodes: tuple[Op, ...]
    chunk_size: int


@dataclass(frozen=True, eq=False)
class CompositePiece(Piece):
    nodes: tuple[Op, ...]


@dataclass(frozen=True, eq=False)
class EmptyPiece(Piece):
    pass


def _steps(piece: Piece) -> tuple[Piece, ...]:
    return piece.steps if isinstance(piece, Chain) else (piece,)


def _branches(piece: Piece) -> tuple[Piece, ...]:
    return piece.branches if isinstance(piece, Fork) else (piece,)


def as_piece(value: PieceLike) -> Piece:
    """A piece from what a user may write in its place (see :data:`PieceLike`)."""
    if isinstance(value, Piece):
        return value
    if isinstance(value, list | tuple):
        if not value:
            raise PlanBuildError("a fork needs at least one branch, got an empty list")
        return Fork(tuple(as_piece(item) for item in value))
    return as_op(value)


def as_op(value: Any, node_id: str | None = None, params: dict[str, Any] | None = None) -> Op:
    """One node from a catalog function or class, or a node id (``str``)."""
    if isinstance(value, Op):
        if node_id is None and not params:
            return value
        merged = {**value.params, **(params or {})}
        return Op(node_id or value.base_id, value.target, merged)
    if isinstance(value, str):
        if not value:
            raise PlanBuildError("a node id must be a non-empty string")
        return Op(node_id or value, None, dict(params or {}))
    if callable(value):
        wanted = node_id or ""  # the catalog name, found when the plan is built
        return Op(wanted, value, dict(params or {}))
    raise PlanBuildError(
        f"{value!r} is not a node: give a catalog function or Filter class "
        "(registered with @node), a node id, or a piece (op(...), loop(...), ...)"
    )
