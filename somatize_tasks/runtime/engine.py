"""The dispatcher: what happens next when a block starts or completes.

How a run moves (no giant canvas, no task waiting on another):

1. ``submit_plan`` records the run and calls :meth:`Engine.start` on the
   root block. Routing blocks (Sequence, Parallel, Remote, Loop, Empty)
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
from typing import Any, Protocol

from scheduler import Branch, Loop, Step
from somatize_tasks.runtime.program import Block, Program
from somatize_tasks.runtime.signals import ControlFlowError
from somatize_tasks.runtime.state import CANCELLED, DONE, FAILED, SKIPPED, LeafResult, RunState
from somatize_tasks.runtime.values import Expr, join_branches


class Dispatcher(Protocol):
    """Where a task block goes to run: a worker's queue, or a local work list."""

    def dispatch(self, block: Block, epoch: int, input_expr: Expr) -> None: ...

    def run_finished(self, status: str, output: Expr | None) -> None: ...


class Engine:
    """Advances one run: constant work per event, all state in :class:`RunState`."""

    def __init__(self, program: Program, state: RunState, dispatcher: Dispatcher) -> None:
        self.program = program
        self.state = state
        self.dispatcher = dispatcher

    # --- starting blocks -------------------------------------------------------------

    def start(self, bid: int, epoch: int, input_expr: Expr) -> None:
        block = self.program.blocks[bid]
        if block.runs_task:
            if block.kind == "Branch":
                self.state.save_input(bid, epoch, input_expr)
            self.dispatcher.dispatch(block, epoch, input_expr)
        elif block.kind == "Parallel" and block.children:
            self.state.open_join(bid, epoch, len(block.children))
            for child in block.children:
                self.start(child, epoch, input_expr)
        elif block.kind == "Loop":
            self._start_loop(block, epoch, input_expr)
        elif block.children:  # Sequence, Remote: their first child
            self.start(block.children[0], epoch, input_expr)
        else:  # Empty, or an empty Sequence/Parallel: the input passes through
            self.complete(bid, epoch, input_expr)

    def _start_loop(self, block: Block, epoch: int, input_expr: Expr) -> None:
        node = block.node
        assert isinstance(node, Loop)
        if node.max_iterations == 0:
            self.complete(block.index, epoch, input_expr)
            return
        pass_epoch = self.state.new_epoch(block.index, epoch, 1)
        self.start(block.children[0], pass_epoch, input_expr)

    # --- completions -----------------------------------------------------------------

    def leaf_done(self, bid: int, epoch: int, result: LeafResult) -> bool:
        """A task block's nodes ran; record it (once) and move the run on.

        False if it was not recorded: a duplicate, or the run had ended.
        """
        block = self.program.blocks[bid]
        if not self.state.record_leaf(bid, epoch, block.task_node_ids(), result):
            return False
        node = block.node
        try:
            if isinstance(node, Branch):
                arm = node.labels().index(result.label or "")
                self._skip_others(block, arm)
                self.start(block.children[arm], epoch, self.state.load_input(bid, epoch))
            elif isinstance(node, Step) and result.handoff is not None:
                target = [label for label, _ in node.handoffs].index(result.handoff)
                self._skip_others(block, target)
                self.start(block.children[target], epoch, result.output)
            else:
                self._skip_others(block, None)
                self.complete(bid, epoch, result.output)
        except ControlFlowError as exc:
            self.fail(block, exc, result.worker_id)
        return True

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

    def complete(self, bid: int, epoch: int, output: Expr) -> None:
        block = self.program.blocks[bid]
        if block.kind == "Loop":
            self.state.settle_nodes(block.node.own_ids(), DONE)
        if block.parent is None:
            if self.state.finish(DONE, output=output):
                self.dispatcher.run_finished(DONE, output)
            return
        parent = self.program.blocks[block.parent]
        if parent.kind == "Sequence":
            following = block.position + 1
            if following < len(parent.children):
                self.start(parent.children[following], epoch, output)
            else:
                self.complete(parent.index, epoch, output)
        elif parent.kind == "Parallel":
            results = self.state.join(parent.index, epoch, block.position, output)
            if results is not None:
                names = self.program.branch_names(parent)
                self.complete(parent.index, epoch, join_branches(results, names))
        elif parent.kind == "Loop":
            self._loop_pass_done(parent, epoch, output)
        else:  # Remote, a Branch arm, a Step handoff: the parent ends with the child
            self.complete(parent.index, epoch, output)

    def _loop_pass_done(self, loop: Block, pass_epoch: int, body_output: Expr) -> None:
        node = loop.node
        assert isinstance(node, Loop)
        _, outer_epoch, pass_number = self.state.epoch_info(pass_epoch)
        try:
            carried = self._carried(node, pass_epoch, pass_number, body_output)
            capped = node.max_iterations is not None and pass_number >= node.max_iterations
            stop = capped or self._signals_stop(loop, pass_epoch, pass_number)
        except ControlFlowError as exc:
            self.fail(loop, exc, "dispatcher")
            return
        if stop:
            # An enclosing loop reads some of this loop's nodes in its own pass.
            self.state.lift(self.program.lifted_out_of(loop), pass_epoch, outer_epoch)
            self.complete(loop.index, outer_epoch, carried)
            return
        next_epoch = self.state.new_epoch(loop.index, outer_epoch, pass_number + 1)
        self.start(loop.children[0], next_epoch, carried)

    def _carried(self, node: Loop, pass_epoch: int, pass_number: int, body_output: Expr) -> Expr:
        """What the next pass starts from: ``carry_from``'s output, else the body's."""
        if node.carry_from is None:
            return body_output
        carried = self.state.node_output(node.carry_from, pass_epoch)
        if carried is None:
            raise ControlFlowError(
                f"loop '{node.node_id}' carries from '{node.carry_from}', "
                f"which did not run in pass {pass_number}"
            )
        return carried

    def _signals_stop(self, loop: Block, pass_epoch: int, pass_number: int) -> bool:
        node = loop.node
        assert isinstance(node, Loop)
        if node.until.type == "Exhaust":
            return False
        if node.until.type == "WhenSignaled":
            return self.state.signal(node.until.node or "", pass_epoch) is True
        # BodyTerminal: the end nodes that ran this pass (one Branch arm's, say) decide.
        ends = self.program.body_exits[loop.index]
        verdicts = [self.state.signal(n, pass_epoch) for n in ends]
        given = [v for v in verdicts if v is not None]
        if not given:
            raise ControlFlowError(
                f"loop '{node.node_id}' stops when its body's last node signals, "
                f"but none of {', '.join(ends)} ran in pass {pass_number}"
            )
        return all(given)

    # --- ending early ----------------------------------------------------------------

    def fail(self, block: Block, error: BaseException, worker_id: str) -> None:
        """End the run as failed, naming the node, its worker and the traceback."""
        nodes = block.task_node_ids()
        detail = failure_detail(nodes[0] if nodes else f"block {block.index}", worker_id, error)
        if self.state.finish(FAILED, error=detail):
            self.dispatcher.run_finished(FAILED, None)

    def cancel(self) -> bool:
        if self.state.finish(CANCELLED):
            self.dispatcher.run_finished(CANCELLED, None)
            return True
        return False


def failure_detail(node_id: str, worker_id: str, error: BaseException) -> dict[str, Any]:
    """The JSON a failed run keeps: enough to say what failed, where and why."""
    return {
        "node_id": node_id,
        "worker_id": worker_id,
        "type": type(error).__name__,
        "message": str(error),
        "traceback": "".join(traceback.format_exception(error)),
    }
