"""Dispatching a block again, recomputing first the inputs its dead worker took along.

A re-dispatched block reuses every input that is inline, in the shared
store, or in a live worker's cache. An input that lived only in a dead
worker's cache is recomputed first, from its producer's own saved input
(recursively), and the block waits for it (``waiting_for: recompute``)
under a new task id. When a recomputed block has run,
:func:`finish_recompute` hands its new outputs to the blocks waiting for
them and publishes those whose inputs are all back.
"""

from __future__ import annotations

from collections.abc import Container

from somatize_tasks.runtime.compile.blocks import Block
from somatize_tasks.runtime.compile.program import Program
from somatize_tasks.runtime.compile.values import Expr, refs_in
from somatize_tasks.runtime.engine.context import RunContext
from somatize_tasks.runtime.engine.dispatch import CeleryDispatcher
from somatize_tasks.runtime.engine.engine import Engine
from somatize_tasks.runtime.state.redis_state import RedisRunState
from somatize_tasks.store import ArtifactRef


class Redispatcher:
    """Dispatches blocks of one run again, given who is alive now."""

    def __init__(
        self,
        context: RunContext,
        state: RedisRunState,
        program: Program,
        dispatcher: CeleryDispatcher,
        alive: Container[str],
    ) -> None:
        self.context = context
        self.state = state
        self.program = program
        self.dispatcher = dispatcher
        self.alive = alive

    def redispatch(self, block: Block, epoch: int) -> None:
        """Publish ``block`` again under a new task id (after any lost inputs)."""
        input_expr = self.state.load_input(block.index, epoch)
        producers = self.lost_producers(input_expr)
        if not producers:
            self.dispatcher.dispatch(block, epoch, input_expr)
            return
        self.dispatcher.wait_for_recompute(block, epoch, [(p.index, e) for p, e in producers])
        for producer, producer_epoch in producers:
            self.redispatch(producer, producer_epoch)

    def lost_producers(self, input_expr: Expr) -> list[tuple[Block, int]]:
        """The blocks (and passes) whose outputs this input reads from a dead worker's
        cache only: neither inline nor in the shared store."""
        lost: dict[tuple[int, int], tuple[Block, int]] = {}
        shared = self.context.store.shared
        for ref in refs_in(input_expr):
            if ref.get("inline") is not None or ref.get("worker_id") in self.alive:
                continue
            artifact = ArtifactRef.model_validate(ref)
            if shared.exists(artifact.key, artifact.size):
                continue
            block = self.program.block_of(artifact.node_id)
            if block is not None:
                lost[(block.index, artifact.iteration)] = (block, artifact.iteration)
        return list(lost.values())


def describe_blocks(program: Program, blocks: list[tuple[int, int]]) -> str:
    """Blocks as people know them: node ids, with the loop pass when not the first
    (``train_svm, evaluate (pass 2)``), never internal ``(block, epoch)`` pairs."""
    shown = []
    for bid, epoch in blocks:
        nodes = "+".join(program.blocks[bid].task_node_ids())
        shown.append(f"{nodes} (pass {epoch})" if epoch else nodes)
    return "node(s) " + ", ".join(shown)


def finish_recompute(
    context: RunContext,
    engine: Engine,
    dispatcher: CeleryDispatcher,
    block: Block,
    epoch: int,
    outputs: dict[str, Expr],
) -> bool:
    """After a recomputed block ran: hand its new outputs to the blocks waiting for them.

    Returns False when the block was not a recomputation (advance as usual).
    """
    state = dispatcher.state
    waiting = state.take_recompute(block.index, epoch, outputs)
    if waiting is None:
        return False
    new_refs = {
        (e["ref"]["node_id"], e["ref"].get("iteration", 0)): e
        for e in outputs.values()
        if "ref" in e
    }
    state.mark_nodes(block.task_node_ids(), "done", context.worker_id, epoch, recomputed=True)
    # The reaper moved nodes to get here: dispatch with the current distribution.
    program = context.program(dispatcher.run_id, refresh=True) or engine.program
    dispatcher = CeleryDispatcher(context, dispatcher.run_id, program, state)
    for bid, dependent_epoch in waiting:
        saved = state.load_input(bid, dependent_epoch)
        state.save_input(bid, dependent_epoch, _replace_refs(saved, new_refs))
        if state.recompute_arrived(bid, dependent_epoch):
            dependent = program.blocks[bid]
            dispatcher.dispatch(dependent, dependent_epoch, state.load_input(bid, dependent_epoch))
    return True


def _replace_refs(expr: Expr, new_refs: dict[tuple[str, int], Expr]) -> Expr:
    if "ref" in expr:
        key = (expr["ref"]["node_id"], expr["ref"].get("iteration", 0))
        return new_refs.get(key, expr)
    for kind in ("map", "graph"):
        if kind in expr:
            return {kind: {k: _replace_refs(v, new_refs) for k, v in expr[kind].items()}}
    return expr
