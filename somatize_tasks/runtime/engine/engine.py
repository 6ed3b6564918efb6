"""The dispatcher: what happens next when a block starts or completes.

How a run moves (no giant canvas, no task waiting on another):

1. ``submit_plan`` records the run and calls :meth:`Engine.begin`, which
   starts the root block. Routing blocks (Sequence, Parallel, Remote, Loop, Empty)
   start their first children at once; a task block (Execute, Composite,
   Stream, and the Branch/Step controllers, which run a node of their own)
   is handed to the :class:`Dispatcher`, which publishes it to its worker's
   queue (after any transfers its inputs need).
2. The worker runs the task and calls :meth:`Engine.leaf_done` in its own
   process. The run state records the result atomically; a duplicate is
   dropped there. Then :meth:`Engine.complete` walks up: a Sequence starts
   its next step, a Parallel counts the branch in (the last one joins), a
   Loop decides on another pass, and so on, publishing whatever became
   ready. A join counts each branch in once, atomically, and exactly one
   completion sees it complete; a loop pass ends with the one task block
   that finishes its body, so it is decided once.
3. When the root completes, the run ends with its output; a failure or
   cancel ends it at once, and nothing further is published.

So the work per completion is constant, and a 10,000-node run is 10,000
small messages, each published only when its inputs are done.
"""

from __future__ import annotations

import traceback
from contextlib import AbstractContextManager
from typing import Any, Protocol

from scheduler import Branch, Loop, Step
from somatize_tasks.errors import ControlFlowError, DiskFullError
from somatize_tasks.runtime.compile.blocks import Block
from somatize_tasks.runtime.compile.control import STOP
from somatize_tasks.runtime.compile.fusion import Chain
from somatize_tasks.runtime.compile.program import Program
from somatize_tasks.runtime.compile.values import (
    NOTHING,
    RUN_INPUT,
    Expr,
    graph_expr,
    join_branches,
    node_input_expr,
)
from somatize_tasks.runtime.state.failures import failed_node, failure_of
from somatize_tasks.runtime.state.run_state import (
    CANCELLED,
    DONE,
    FAILED,
    SKIPPED,
    LeafResult,
    RunState,
)


class Dispatcher(Protocol):
    """Where a task block goes to run: a worker's queue, or a local work list."""

    def dispatch(self, block: Block, epoch: int, input_expr: Expr) -> None: ...

    def together(self) -> AbstractContextManager[None]:
        """Blocks dispatched inside may go out together (batched) at its end."""
        ...

    def run_finished(self, status: str, output: Expr | None) -> None: ...


class Engine:
    """Advances one run: constant work per event, all state in :class:`RunState`.

    What flows between blocks (``flow`` below) depends on the run's data
    model. Without a predecessors graph it is the data itself: a Sequence
    threads each output into the next step. With one, every task block
    reads its inputs from its predecessors' latest outputs, and ``flow`` is
    the last value written, as Soma's run returns the last node executed.
    """

    def __init__(self, program: Program, state: RunState, dispatcher: Dispatcher) -> None:
        self.program = program
        self.state = state
        self.dispatcher = dispatcher
        self._run_input: Expr | None = None
        #: Redoing a dead process's follow-up (the reaper): a join it counted in is
        #: taken as complete when every branch is in.
        self.redoing = False

    def begin(self, input_expr: Expr) -> None:
        """Start the run at its root block."""
        self._run_input = input_expr
        self.start(0, 0, NOTHING if self.program.follows_graph else input_expr)

    # --- starting blocks -------------------------------------------------------------

    def start(self, bid: int, epoch: int, flow: Expr) -> None:
        block = self.program.blocks[bid]
        if block.runs_task:
            self.dispatcher.dispatch(block, epoch, self._task_input(block, flow))
        elif block.kind == "Parallel" and block.children:
            self.state.open_join(bid, epoch, len(block.children))
            if self.program.follows_graph:
                self.state.save_input(bid, epoch, flow)  # what "nothing written" looks like
            with self.dispatcher.together():
                for child in block.children:
                    self.start(child, epoch, flow)
        elif block.kind == "Loop":
            self._start_loop(block, epoch, flow)
        elif block.children:  # Sequence, Remote: their first child
            self.start(block.children[0], epoch, flow)
        else:  # Empty, or an empty Sequence/Parallel: nothing written, the flow goes on
            self.complete(bid, epoch, flow)

    def _task_input(self, block: Block, flow: Expr) -> Expr:
        """What a task block reads: the flow, or its predecessors' latest outputs."""
        if not self.program.follows_graph:
            return flow
        return graph_expr(self._latest_of(*self.program.reads_of(block)))

    def _latest_of(self, preds: list[str], wants_input: bool) -> dict[str, Expr]:
        """The latest outputs of ``preds`` (those that produced one), and the run's
        input under ``RUN_INPUT`` when a reader has no predecessor."""
        available = self.state.latest(preds)
        if wants_input:
            available[RUN_INPUT] = self.run_input()
        return available

    def run_input(self) -> Expr:
        if self._run_input is None:
            self._run_input = self.state.run_input()
        return self._run_input

    def _start_loop(self, block: Block, epoch: int, flow: Expr) -> None:
        """Soma seeds a loop with its own input: the loop node's value, which the
        body reads (a pass without ``carry_from`` starts from it again)."""
        node = block.node
        assert isinstance(node, Loop)
        seed = flow
        if self.program.follows_graph:
            preds = self.program.preds_of(node.node_id)
            seed = node_input_expr(preds, self._latest_of(preds, not preds))
        self.state.set_latest(node.node_id, seed)
        if node.cap == 0:
            self.complete(block.index, epoch, seed)
            return
        if next(node.body.iter_node_ids(), None) is None:
            self._empty_body_loop(block, epoch, seed)
            return
        pass_epoch = self.state.new_epoch(block.index, epoch, 1)
        self.start(block.children[0], pass_epoch, seed)

    def _empty_body_loop(self, block: Block, epoch: int, seed: Expr) -> None:
        """A body with no nodes changes nothing, so every pass is the first: the loop
        passes its input through (or ``carry_from``'s value), and a condition node
        that never produced a value fails it, as Soma's loop does on its first pass."""
        node = block.node
        assert isinstance(node, Loop)
        carried = self._advance_carry(node)
        try:
            self._signals_stop(node, 1)
        except ControlFlowError as exc:
            self.fail(block, exc, "dispatcher")
            return
        self.complete(block.index, epoch, seed if carried is None else carried)

    # --- completions -----------------------------------------------------------------

    def leaf_done(self, bid: int, epoch: int, result: LeafResult) -> bool:
        """A task block's nodes ran; record it (once) and move the run on.

        False if it was not recorded: a duplicate, or the run had ended.
        """
        block = self.program.blocks[bid]
        node = block.node
        parent = None if block.parent is None else self.program.blocks[block.parent]
        ends_here = not isinstance(node, Branch) and result.handoff is None
        if ends_here and parent is not None and parent.kind == "Parallel":
            return self._branch_done(block, parent, epoch, result)
        if not self.state.record_leaf(bid, epoch, block.task_node_ids(), result):
            return False
        self.follow_up(bid, epoch, result.output, result.label, result.handoff, result.worker_id)
        return True

    def follow_up(
        self,
        bid: int,
        epoch: int,
        output: Expr,
        label: str | None,
        handoff: str | None,
        worker_id: str = "dispatcher",
    ) -> None:
        """What a recorded task block's completion makes ready. Its dispatches are
        recorded together at the end, with the completion's intent cleared in the same
        round trip, so a death before that leaves the intent for the reaper to redo
        this (with the output, label and handoff it kept): nothing before it is lost."""
        block = self.program.blocks[bid]
        node = block.node
        try:
            with self.dispatcher.together():
                if isinstance(node, Branch):
                    arm = node.labels().index(label or "")
                    self._skip_others(block, arm)
                    self.start(block.children[arm], epoch, output)
                elif isinstance(node, Step) and handoff is not None:
                    target = [name for name, _ in node.handoffs].index(handoff)
                    self._skip_others(block, target)
                    self.start(block.children[target], epoch, output)
                else:
                    self._skip_others(block, None)
                    self.complete(bid, epoch, output)
        except ControlFlowError as exc:
            self.fail(block, exc, worker_id)
        self.state.follow_up_done()  # not on an error: the intent stays for the reaper

    def _branch_done(self, block: Block, parallel: Block, epoch: int, result: LeafResult) -> bool:
        """A task block that is a Parallel's branch: record and join in one step."""
        recorded, joined = self.state.record_and_join(
            block.index, epoch, block.task_node_ids(), result, parallel.index, block.position
        )
        if not recorded:
            return False
        self._skip_others(block, None)
        if joined is not None:
            self.joined(parallel.index, epoch, joined)
        return True

    def joined(self, parallel_bid: int, epoch: int, results: list[Expr]) -> None:
        """A Parallel's last branch is in: it completes (the intent's follow-up)."""
        parallel = self.program.blocks[parallel_bid]
        with self.dispatcher.together():
            self.complete(parallel_bid, epoch, self._joined(parallel, epoch, results))
        self.state.follow_up_done()

    def _skip_others(self, block: Block, chosen: int | None) -> None:
        """The arms (handoffs) not taken will not run: say so, so progress can finish."""
        skipped = [
            node_id
            for position, child in enumerate(block.children)
            if position != chosen
            for node_id in self.program.blocks[child].node.iter_node_ids()
        ]
        if skipped:
            self.state.settle_nodes(skipped, SKIPPED)

    def complete(self, bid: int, epoch: int, flow: Expr) -> None:
        block = self.program.blocks[bid]
        if block.kind == "Loop":
            self.state.settle_nodes(block.node.own_ids(), DONE)
        if block.parent is None:
            output = flow if self.program.node_count else NOTHING  # nothing written: null
            if self.state.finish(DONE, output=output):
                self.dispatcher.run_finished(DONE, output)
            return
        parent = self.program.blocks[block.parent]
        if parent.kind == "Sequence":
            following = block.position + 1
            if following < len(parent.children):
                self.start(parent.children[following], epoch, flow)
            else:
                self.complete(parent.index, epoch, flow)
        elif parent.kind == "Parallel":
            results = self.state.join(parent.index, epoch, block.position, flow)
            if results is None and self.redoing:  # this branch may have joined before
                results = self.state.join_slots(parent.index, epoch)
            if results is not None:
                self.complete(parent.index, epoch, self._joined(parent, epoch, results))
        elif parent.kind == "Loop":
            self._loop_pass_done(parent, epoch, flow)
        else:  # Remote, a Branch arm, a Step handoff: the parent ends with the child
            self.complete(parent.index, epoch, flow)

    def _joined(self, parallel: Block, epoch: int, results: list[Expr]) -> Expr:
        """A Parallel's flow: the branches' outputs by node id, or with a graph the
        last value written, taken from the last branch that wrote one (Soma merges
        branches in order; which of a branch's writes is last is a race there)."""
        if not self.program.follows_graph:
            return join_branches(results, self.program.branch_names(parallel))
        before = self.state.load_input(parallel.index, epoch)
        return next((r for r in reversed(results) if r != before), before)

    def _loop_pass_done(self, loop: Block, pass_epoch: int, body_flow: Expr) -> None:
        """Soma's order: advance the carry, then read the condition, then the cap."""
        node = loop.node
        assert isinstance(node, Loop)
        info = self.state.epoch_info(pass_epoch)
        carried = self._advance_carry(node)
        flow = body_flow if carried is None else carried
        try:
            signalled = self._signals_stop(node, info.number)
        except ControlFlowError as exc:
            self.fail(loop, exc, "dispatcher")
            return
        stop = signalled or info.number >= node.cap
        if stop and not signalled and node.until.type != "Exhaust":
            self.state.add_warning(f"loop:{node.node_id}", capped_loop(node))
        if info.previous:  # bounded: the pass before this one is forgotten (state.start_state)
            self.state.forget_pass(info.previous, loop.index, self.program.pass_blocks)
        if stop:
            self.state.leave_pass(info.outer, loop.index, pass_epoch)
            self.complete(loop.index, info.outer, flow)
            return
        next_epoch = self.state.new_epoch(loop.index, info.outer, info.number + 1, pass_epoch)
        if next_epoch < 0:
            self._over_budget(loop, info.number)
            return
        if not self.program.follows_graph:  # the next pass reads the loop node's value
            flow = self.state.latest([node.node_id])[node.node_id]
        self.start(loop.children[0], next_epoch, flow)

    def _over_budget(self, loop: Block, passes: int) -> None:
        """The run's pass budget is spent: it fails, naming the loop (no traceback)."""
        node_id = loop.node.own_ids()[0]
        detail = {
            "node_id": node_id,
            "worker_id": None,
            "type": "PassBudgetExceeded",
            "message": f"loop '{node_id}' would start pass {passes + 1}, past the run's "
            "budget of loop passes (all loops together: SOMATIZE_RUN_MAX_PASSES, or "
            "submit_plan(max_passes=...))",
            "traceback": "",
        }
        self.state.settle_nodes(loop.node.own_ids(), FAILED)
        if self.state.finish(FAILED, error=detail):
            self.dispatcher.run_finished(FAILED, None)

    def _advance_carry(self, node: Loop) -> Expr | None:
        """The loop node takes ``carry_from``'s latest output, if it has one."""
        if node.carry_from is None:
            return None
        carried = self.state.latest([node.carry_from]).get(node.carry_from)
        if carried is not None:
            self.state.set_latest(node.node_id, carried)
        return carried

    def _signals_stop(self, node: Loop, pass_number: int) -> bool:
        """Only ``WhenSignaled`` reads a signal (Exhaust and BodyTerminal run to the cap)."""
        if node.until.type != "WhenSignaled" or node.until.node is None:
            return False
        verdict = self.state.latest_signal(node.until.node)
        if verdict is None:
            raise ControlFlowError(
                f"loop '{node.node_id}': condition node '{node.until.node}' produced "
                f"no output by the end of pass {pass_number}"
            )
        if verdict not in (STOP, "continue"):
            raise ControlFlowError(verdict)
        return verdict == STOP

    # --- ending early ----------------------------------------------------------------

    def node_failed(self, block: Block, epoch: int, error: Exception, worker_id: str) -> None:
        """A task raised: its node is failed (with its own start and error), the nodes
        of its block that had finished are done (with their times and outputs, as if
        each had been a task of its own); in a fused chain the nodes after it never
        ran (pending, as unfused), in a Composite they are cancelled. The run fails."""
        failure = failure_of(error, block.task_node_ids())
        times = {"ended_at": failure.ended_at}
        if failure.started_at is not None:
            times["started_at"] = failure.started_at
        self.state.mark_nodes(
            [failure.node],
            FAILED,
            worker_id,
            epoch,
            error=f"{type(error).__name__}: {error}",
            **times,
        )
        if failure.done:
            self.state.record_finished(failure.done, failure.outputs, worker_id, epoch)
        if failure.after and isinstance(block.node, Chain):
            self.state.forget_nodes(failure.after)  # they never ran, as when run unfused
        elif failure.after:
            self.state.mark_nodes(failure.after, CANCELLED, worker_id, epoch)
        self.fail(block, error, worker_id)

    def fail(self, block: Block, error: BaseException, worker_id: str) -> None:
        """End the run as failed, naming the node, its worker and the traceback."""
        nodes = block.task_node_ids() or block.node.own_ids()
        named = failed_node(error) or (nodes[0] if nodes else None)
        detail = failure_detail(named or f"block {block.index}", worker_id, error)
        if self.state.finish(FAILED, error=detail):
            self.dispatcher.run_finished(FAILED, None)

    def cancel(self) -> bool:
        if self.state.finish(CANCELLED):
            self.dispatcher.run_finished(CANCELLED, None)
            return True
        return False


def capped_loop(node: Loop) -> str:
    """The run's warning when a loop ends at its cap without being told to stop."""
    why = (
        f"without a stop signal from '{node.until.node}'"
        if node.until.type == "WhenSignaled"
        else "without a stop signal (until BodyTerminal reads none: name the node that "
        "decides with WhenSignaled)"
    )
    cap = "Soma's cap of" if node.max_iterations is None else "its cap of"
    return f"loop '{node.node_id}' stopped at {cap} {node.cap} passes {why}"


def failure_detail(node_id: str, worker_id: str, error: BaseException) -> dict[str, Any]:
    """The JSON a failed run keeps: enough to say what failed, where and why."""
    return {
        "node_id": node_id,
        "worker_id": worker_id,
        "type": type(error).__name__,
        "message": str(error),
        # A full disk is said in one line naming what to fix: no traceback to read.
        "traceback": ""
        if isinstance(error, DiskFullError)
        else "".join(traceback.format_exception(error)),
    }
