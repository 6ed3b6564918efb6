"""What the dispatcher needs to remember about a run, as a narrow interface.

:class:`RunState` is implemented twice: :class:`MemoryRunState` for local,
in-process runs (``somatize-tasks run``, the no-worker fallback) and
:class:`somatize_tasks.runtime.state.redis_state.RedisRunState` for distributed
runs, where every method is one atomic Redis round trip. The dispatcher
(:mod:`somatize_tasks.runtime.engine.engine`) is written against this interface
only, so both kinds of run compute the same thing.

Keys used below: ``bid`` is a block index of the compiled program,
``epoch`` numbers one pass of a loop body (0 outside any loop).

Besides each node's output per pass, a run keeps every node's *latest*
output and loop signal, as Soma's executor keeps one value per node in its
context: a loop's carry and its ``WhenSignaled`` condition, and every input
of a run that follows a predecessors graph, read the latest value.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from somatize_tasks.runtime.compile.values import Expr

RUNNING, DONE, FAILED, CANCELLED = "running", "done", "failed", "cancelled"
SKIPPED = "skipped"
FINAL_STATES = frozenset({DONE, FAILED, CANCELLED})


class PassInfo(NamedTuple):
    """One loop pass: its loop, the enclosing pass, its number, and the pass before it
    (0 for the first, or for a pass recorded by a version that did not keep it)."""

    loop: int
    outer: int
    number: int
    previous: int


#: A pass's blocks (``Program.pass_blocks``): (block, branches if a Parallel, is a loop).
PassShape = list[tuple[int, int, bool]]


@dataclass
class LeafResult:
    """What a task reports when its block's nodes have run.

    ``output`` is the block's output; ``node_outputs`` every node's own
    output (a Composite has several; a Branch node's is its input, as in
    Soma); ``signals`` the verdict of loop condition nodes (``"stop"``,
    ``"continue"``, or why there is none); ``states`` the states a fit
    learned; ``label`` a Branch's chosen arm; ``handoff`` a Step's chosen
    handoff (``output`` is then what the handoff receives).
    """

    output: Expr
    node_outputs: dict[str, Expr] = field(default_factory=dict)
    signals: dict[str, str] = field(default_factory=dict)
    states: dict[str, Expr] = field(default_factory=dict)
    #: Each node's [started, ended] when a task runs several (a fused chain).
    node_times: dict[str, list[float]] = field(default_factory=dict)
    #: The run-history lines to record with the result (somatize_tasks.runtime.state.history).
    history: list[str] = field(default_factory=list)
    label: str | None = None
    handoff: str | None = None
    #: Nodes served from the content cache (none of their code ran), and the cache key
    #: of each node whose output came from or went to the cache.
    cached: list[str] = field(default_factory=list)
    cache_keys: dict[str, str] = field(default_factory=dict)
    worker_id: str = "local"
    #: The execution's fencing token (``mark_running``); 0 where nothing is fenced.
    attempt: int = 0
    started_at: float = 0.0
    ended_at: float = 0.0


def node_done(result: LeafResult, node_id: str, epoch: int) -> dict[str, Any]:
    """A finished node's status: its own times when the task measured them."""
    started, ended = result.node_times.get(node_id, (result.started_at, result.ended_at))
    done = {
        "state": DONE,
        "worker": result.worker_id,
        "epoch": epoch,
        "started_at": started,
        "ended_at": ended,
    }
    if result.attempt:
        done["attempt"] = result.attempt  # the attempt that won (fencing)
    if node_id in result.cached:
        done["cached"] = True
    if node_id in result.cache_keys:
        done["cache_key"] = result.cache_keys[node_id]
    return done


class RunState(Protocol):
    """Atomic bookkeeping for one run."""

    def is_active(self) -> bool: ...

    def record_leaf(self, bid: int, epoch: int, nodes: list[str], result: LeafResult) -> bool:
        """Record a task's result; False if it was already recorded or the run is over.

        The first completion of a block wins; a duplicate (a message that
        ran twice) is dropped here, before it can advance the run.
        """
        ...

    def record_and_join(
        self,
        bid: int,
        epoch: int,
        nodes: list[str],
        result: LeafResult,
        parallel: int,
        position: int,
    ) -> tuple[bool, list[Expr] | None]:
        """A Parallel branch's result, recorded and counted into the join at once:
        whether it was recorded, and every branch's output if it was the last."""
        ...

    def latest(self, node_ids: list[str]) -> dict[str, Expr]:
        """The latest output of each of these nodes that has produced one."""
        ...

    def set_latest(self, node_id: str, expr: Expr) -> None:
        """A control node's value: a Loop's carry (its input, then ``carry_from``'s)."""
        ...

    def latest_signal(self, node_id: str) -> str | None:
        """The verdict of the node's latest output as a loop signal, None if it has none."""
        ...

    def run_input(self) -> Expr: ...

    def save_input(self, bid: int, epoch: int, expr: Expr) -> None: ...

    def load_input(self, bid: int, epoch: int) -> Expr: ...

    def open_join(self, bid: int, epoch: int, expected: int) -> None: ...

    def join(self, bid: int, epoch: int, position: int, expr: Expr) -> list[Expr] | None:
        """Add one branch result; all results (in branch order) once the last arrives."""
        ...

    def new_epoch(
        self, loop_bid: int, outer_epoch: int, pass_number: int, previous: int = 0
    ) -> int:
        """Number a new pass (``OVER_BUDGET``, -1, past the run's pass budget)."""
        ...

    def epoch_info(self, epoch: int) -> PassInfo:
        """The loop, outer epoch, pass number and previous pass of a loop pass epoch."""
        ...

    def leave_pass(self, outer_epoch: int, loop_bid: int, last_epoch: int) -> None:
        """A loop's last pass, to be forgotten with its enclosing pass."""
        ...

    def forget_pass(self, epoch: int, loop_bid: int, shape_of: Callable[[int], PassShape]) -> int:
        """Drop what a finished pass kept (and loops nested in it): runtime.state.start_state."""
        ...

    def mark_nodes(
        self, nodes: list[str], state: str, worker_id: str, epoch: int, **extra: Any
    ) -> None: ...

    def finish(
        self, status: str, output: Expr | None = None, error: dict[str, Any] | None = None
    ) -> bool:
        """End the run once; False if it had already ended."""
        ...

    def follow_up_done(self) -> None:
        """A completion's follow-up is over: its intent (if any is left) is dropped."""
        ...

    def join_slots(self, bid: int, epoch: int) -> list[Expr] | None:
        """A Parallel's branch outputs once every branch is in, else None."""
        ...

    def settle_nodes(self, nodes: list[str], state: str) -> None:
        """Nodes that ran no task of their own end in ``state``: a loop controller
        is ``done`` when its loop is, the arms a Branch did not take are ``skipped``."""
        ...

    def record_finished(
        self, times: dict[str, list[float]], outputs: dict[str, Expr], worker_id: str, epoch: int
    ) -> None:
        """Nodes of a failed task that had finished before it failed: done, with their
        own ``[started, ended]`` and outputs, counted as done like any completion."""
        ...

    def forget_nodes(self, nodes: list[str]) -> None:
        """Nodes marked running with their task that never started: back to pending."""
        ...

    def add_warning(self, key: str, message: str) -> None:
        """A warning the run raised while running (one per ``key``: the latest kept)."""
        ...


class MemoryRunState:
    """:class:`RunState` in a process's memory, for local runs."""

    def __init__(self, input_expr: Expr, max_passes: int = 0) -> None:
        self.status = RUNNING
        self.input = input_expr
        self.output: Expr | None = None
        self.error: dict[str, Any] | None = None
        self.leaves: dict[tuple[int, int], LeafResult] = {}
        self.latest_outputs: dict[str, Expr] = {}
        self.signals: dict[str, str] = {}
        self.states: dict[str, Expr] = {}
        self.inputs: dict[tuple[int, int], Expr] = {}
        self.joins: dict[tuple[int, int], list[Expr | None]] = {}
        self.waiting: dict[tuple[int, int], int] = {}
        self.epochs: dict[int, PassInfo] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.warnings: dict[str, str] = {}
        #: Passes numbered so far, and the most allowed (0: no budget).
        self.passes = 0
        self.max_passes = max_passes

    def is_active(self) -> bool:
        return self.status == RUNNING

    def record_leaf(self, bid: int, epoch: int, nodes: list[str], result: LeafResult) -> bool:
        if not self.is_active() or (bid, epoch) in self.leaves:
            return False
        self.leaves[bid, epoch] = result
        self.latest_outputs.update(result.node_outputs)
        self.signals.update(result.signals)
        self.states.update(result.states)
        for node_id in nodes:
            self.nodes[node_id] = node_done(result, node_id, epoch)
        return True

    def record_and_join(
        self,
        bid: int,
        epoch: int,
        nodes: list[str],
        result: LeafResult,
        parallel: int,
        position: int,
    ) -> tuple[bool, list[Expr] | None]:
        if not self.record_leaf(bid, epoch, nodes, result):
            return False, None
        return True, self.join(parallel, epoch, position, result.output)

    def latest(self, node_ids: list[str]) -> dict[str, Expr]:
        found = self.latest_outputs
        return {n: found[n] for n in node_ids if n in found}

    def set_latest(self, node_id: str, expr: Expr) -> None:
        self.latest_outputs[node_id] = expr

    def latest_signal(self, node_id: str) -> str | None:
        return self.signals.get(node_id)

    def run_input(self) -> Expr:
        return self.input

    def save_input(self, bid: int, epoch: int, expr: Expr) -> None:
        self.inputs[bid, epoch] = expr

    def load_input(self, bid: int, epoch: int) -> Expr:
        return self.inputs[bid, epoch]

    def open_join(self, bid: int, epoch: int, expected: int) -> None:
        self.joins[bid, epoch] = [None] * expected
        self.waiting[bid, epoch] = expected

    def join(self, bid: int, epoch: int, position: int, expr: Expr) -> list[Expr] | None:
        slots = self.joins[bid, epoch]
        if slots[position] is not None:
            return None
        slots[position] = expr
        self.waiting[bid, epoch] -= 1
        if self.waiting[bid, epoch]:
            return None
        return [slot for slot in slots if slot is not None]

    def join_slots(self, bid: int, epoch: int) -> list[Expr] | None:
        if self.waiting.get((bid, epoch), 1):
            return None
        return [slot for slot in self.joins[bid, epoch] if slot is not None]

    def follow_up_done(self) -> None:
        """Nothing to clear: a local run has no other process to redo a follow-up."""

    def new_epoch(
        self, loop_bid: int, outer_epoch: int, pass_number: int, previous: int = 0
    ) -> int:
        self.passes += 1
        if self.max_passes and self.passes > self.max_passes:
            return -1
        self.epochs[self.passes] = PassInfo(loop_bid, outer_epoch, pass_number, previous)
        return self.passes

    def epoch_info(self, epoch: int) -> PassInfo:
        return self.epochs[epoch]

    def leave_pass(self, outer_epoch: int, loop_bid: int, last_epoch: int) -> None:
        """Nothing to do: :meth:`forget_pass` finds nested passes by their outer pass."""

    def forget_pass(self, epoch: int, loop_bid: int, shape_of: Callable[[int], PassShape]) -> int:
        """Drop every (block, pass) entry of ``epoch`` and of the passes nested in it."""
        doomed, todo = set(), [epoch]
        while todo:
            current = todo.pop()
            doomed.add(current)
            todo += [e for e, info in self.epochs.items() if info.outer == current]
        gone = 0
        tables: list[dict[tuple[int, int], Any]] = [
            self.leaves,
            self.inputs,
            self.joins,
            self.waiting,
        ]
        for table in tables:
            for key in [k for k in table if k[1] in doomed]:
                del table[key]
                gone += 1
        for pass_epoch in doomed:
            self.epochs.pop(pass_epoch, None)
        return gone

    def mark_nodes(
        self, nodes: list[str], state: str, worker_id: str, epoch: int, **extra: Any
    ) -> None:
        now = time.time()
        for node_id in nodes:
            entry = self.nodes.setdefault(node_id, {})
            entry.update(state=state, worker=worker_id, epoch=epoch, **extra)
            entry.setdefault("started_at", now) if state == RUNNING else None

    def settle_nodes(self, nodes: list[str], state: str) -> None:
        for node_id in nodes:
            self.nodes.setdefault(node_id, {}).update(state=state)

    def record_finished(
        self, times: dict[str, list[float]], outputs: dict[str, Expr], worker_id: str, epoch: int
    ) -> None:
        self.latest_outputs.update(outputs)
        for node_id, (started, ended) in times.items():
            self.nodes[node_id] = {
                "state": DONE,
                "worker": worker_id,
                "epoch": epoch,
                "started_at": started,
                "ended_at": ended,
            }

    def forget_nodes(self, nodes: list[str]) -> None:
        for node_id in nodes:
            self.nodes.pop(node_id, None)

    def add_warning(self, key: str, message: str) -> None:
        self.warnings[key] = message

    def finish(
        self, status: str, output: Expr | None = None, error: dict[str, Any] | None = None
    ) -> bool:
        if self.status in FINAL_STATES:
            return False
        self.status, self.output, self.error = status, output, error
        return True
