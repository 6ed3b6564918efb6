"""What node code can ask about the run it is part of: its seed, its study trial.

While a worker runs a node it sets the node's context here; node code reads
it with plain functions, so a node needs no extra parameter to take part in
a study::

    @node("train")
    def train(data, lr=0.01, epochs=20):
        random.seed(current_seed())
        for epoch in range(epochs):
            loss = ...
            if report("loss", loss, step=epoch):  # the pruner says stop
                break
        return {"loss": loss}

Outside a study trial, :func:`report` records nothing and returns False;
outside a node (a plain call in a notebook), every function here answers as
for a run with no seed and no trial.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

Reporter = Callable[[str, str, float, int], bool]


@dataclass(frozen=True)
class NodeContext:
    """The run a node is running in, as its worker knows it."""

    run_id: str
    node_id: str
    seed: int | None = None
    #: ``{"study": id, "number": n, "params": {...}, "seed": s}`` in a study trial.
    trial: dict[str, Any] | None = None
    #: Sends ``(node_id, name, value, step)`` to the study; True: stop (pruned).
    reporter: Reporter | None = field(default=None, compare=False)


_current: ContextVar[NodeContext | None] = ContextVar("somatize_node_context", default=None)


@contextmanager
def running(context: NodeContext) -> Iterator[None]:
    """Set while a node's code runs (the worker does this)."""
    token = _current.set(context)
    try:
        yield
    finally:
        _current.reset(token)


def current_context() -> NodeContext | None:
    return _current.get()


def current_seed() -> int | None:
    """The run's experiment seed (a study trial's seed), or None."""
    context = _current.get()
    return None if context is None else context.seed


def current_trial() -> dict[str, Any] | None:
    """The study trial this node runs in (its number, params and seed), or None."""
    context = _current.get()
    return None if context is None or context.trial is None else dict(context.trial)


def report(name: str, value: float, step: int) -> bool:
    """Report an intermediate metric of this trial; True when the pruner says stop.

    Soma's ``trial.report(name, value, step)``: the study's pruner compares it
    with what other trials reported at the same step. Outside a trial it is
    recorded nowhere and the answer is False (go on).
    """
    context = _current.get()
    if context is None or context.reporter is None:
        return False
    return context.reporter(context.node_id, str(name), float(value), int(step))
