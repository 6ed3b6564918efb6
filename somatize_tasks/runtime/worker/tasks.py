"""The Celery tasks that run plans: thin, each decodes and calls plain functions.

``somatize.node.run``
    runs one task block (a node, a Composite, a Stream, a Branch condition,
    a Step) on the worker whose queue it was published to, stores the
    outputs and advances the run (:mod:`somatize_tasks.runtime.engine.engine`).
``somatize.node.batch``
    runs several independent blocks of one run on this worker, one after
    another (they became ready together; see ``CeleryDispatcher.together``).
``somatize.run.input_ready``
    ends a transfer chain on the target worker; the last one for a block
    publishes the block.

All three ride out a Redis restart (:mod:`somatize_tasks.runtime.recovery.outage`):
they wait for Redis to answer again and redo their work, rather than end
with a ``ConnectionError`` that would leave their node ``running``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from celery import Task, shared_task

from somatize_tasks.catalog.entries import default_catalog
from somatize_tasks.config.clock import redis_clock, redis_now
from somatize_tasks.config.keys import (
    INPUT_READY_TASK,
    NODE_BATCH_TASK,
    NODE_TASK,
    TRANSFER_FAILED_TASK,
)
from somatize_tasks.errors import TransferFailedError
from somatize_tasks.messaging.celery_app import settings_of
from somatize_tasks.runtime.compile.values import Expr
from somatize_tasks.runtime.engine.context import RunContext, run_context
from somatize_tasks.runtime.engine.dispatch import CeleryDispatcher
from somatize_tasks.runtime.engine.engine import Engine
from somatize_tasks.runtime.engine.transfer_chains import transfer_record
from somatize_tasks.runtime.recovery.deaths import fail_for_deaths, restart_is_death
from somatize_tasks.runtime.recovery.outage import through_redis_outages
from somatize_tasks.runtime.recovery.recompute import finish_recompute
from somatize_tasks.runtime.state import history
from somatize_tasks.runtime.state.starts import PendingStart
from somatize_tasks.runtime.worker.leaf import run_block
from somatize_tasks.runtime.worker.reporting import reporter_for

log = logging.getLogger(__name__)
T = TypeVar("T")


def engine_for(
    context: RunContext, run_id: str, *, refresh: bool = False
) -> tuple[Engine, CeleryDispatcher] | None:
    program = context.program(run_id, refresh=refresh)
    if program is None:
        log.warning("run %s is unknown to Redis (expired or never submitted); dropping", run_id)
        return None
    state = context.state(run_id)
    dispatcher = CeleryDispatcher(context, run_id, program, state)
    return Engine(program, state, dispatcher), dispatcher


def execute_block(
    context: RunContext,
    run_id: str,
    bid: int,
    epoch: int,
    input_expr: Expr,
    task_id: str,
    *,
    started: PendingStart | None = None,
    ahead: tuple[int, int] | None = None,
    first_try: bool = True,
    summary: list[str] | None = None,
) -> PendingStart | None:
    """Run one block here and advance its run; a failure fails the run and re-raises.

    In a batch, ``ahead`` is the next block (block, pass): its start rides in this
    block's record (:mod:`~somatize_tasks.runtime.state.starts`) and is returned, to be
    passed to it as ``started``. ``first_try``: False when this is done again after a
    Redis outage (its own earlier start is then no death; runtime.deaths).

    Fencing: the start hands this execution an attempt number; its values go under
    keys of their own and its record holds only while that attempt is the block's
    current one. A fenced execution (the block ran again elsewhere meanwhile) stops
    here, saying so in one log line: its values are never referenced.

    ``summary`` gets a line saying which nodes ran and which came from the content
    cache (the task's result, which Flower shows).
    """
    found = engine_for(context, run_id)
    if found is None:
        return None
    engine, dispatcher = found
    block = engine.program.blocks[bid]
    nodes = block.task_node_ids()
    state = dispatcher.state
    state.owner = (context.worker_id, task_id)  # in its completion's intent (runtime.outbox)
    if started is None or not started.sent:
        # Starting gives back a slot the run reserved here: the heartbeat counts it now.
        started = state.start_block(
            nodes,
            context.worker_id,
            bid,
            epoch,
            task_id,
            history.start_line(context.worker_id, nodes, epoch, redis_now(context.redis)),
            release_slot=True,
        )
    version = started.version
    if version is None:
        log.info("run %s: %s already done, re-dispatched or the run ended; skipping", run_id, nodes)
        return None
    if started.previous is not None and first_try:
        # This very task had started before and never finished: that execution died
        # (counted from the run's own records, never from a broker flag; runtime.deaths).
        poisoned = restart_is_death(
            state, engine.program, block, started.previous, context.settings.max_node_deaths
        )
        if poisoned:  # it killed the process running it too often
            fail_for_deaths(state, poisoned, nodes, {"worker": context.worker_id, "epoch": epoch})
            return None
    if version != engine.program.version:
        engine, dispatcher = engine_for(context, run_id, refresh=True) or (engine, dispatcher)
        block = engine.program.blocks[bid]
    attempt = started.attempt
    try:
        result = run_block(
            engine.program,
            block,
            run_id,
            epoch,
            input_expr,
            store=context.values,
            catalog=default_catalog,
            worker_id=context.worker_id,
            attempt=attempt,
            cache=context.content_cache if engine.program.cache else None,
            reporter=reporter_for(context, engine.program.trial, run_id),
            clock=redis_clock(context.redis).now,  # one clock for every machine
        )
    except Exception as exc:
        if not state.is_current(nodes[0], epoch, attempt):
            _say_fenced(run_id, nodes, epoch, attempt, "its failure is ignored")
            return None
        history.record_failure(context.history_log(), run_id, nodes, epoch, exc)
        engine.node_failed(block, epoch, exc, context.worker_id)
        raise
    if summary is not None:
        summary.append(outcome_line(nodes, result.cached))
    result.history = history.done_lines(
        context.worker_id, nodes, epoch, result.node_times, result.ended_at, result.cached
    )
    following = None
    if ahead is not None:
        next_nodes = engine.program.blocks[ahead[0]].task_node_ids()
        following = state.pending_start(
            next_nodes,
            context.worker_id,
            ahead[0],
            ahead[1],
            task_id,
            history.start_line(context.worker_id, next_nodes, ahead[1], redis_now(context.redis)),
            release_slot=True,
        )
    if not engine.leaf_done(bid, epoch, result):
        if state.fenced:
            _say_fenced(run_id, nodes, epoch, attempt, "its values are dropped")
        else:
            # Already recorded: either a duplicate (dropped) or a recomputation the
            # reaper asked for, whose new outputs go to the blocks waiting for them.
            finish_recompute(context, engine, dispatcher, block, epoch, result.node_outputs)
    return following if following is not None and following.sent else None


def outcome_line(nodes: list[str], cached: list[str]) -> str:
    """``ran: a, b; cached: c``: what a block's task did, for Flower's result column."""
    ran = [n for n in nodes if n not in cached]
    parts = ([f"ran: {', '.join(ran)}"] if ran else []) + (
        [f"cached: {', '.join(cached)}"] if cached else []
    )
    return "; ".join(parts)


def _say_fenced(run_id: str, nodes: list[str], epoch: int, attempt: int, what: str) -> None:
    """The one line a fenced execution leaves: its node ran again since it started."""
    log.warning(
        "run %s: %s (pass %d) attempt %d is fenced: the node was dispatched again while "
        "this worker ran it (a pause, a partition or a replay); %s and nothing follows it",
        run_id,
        "+".join(nodes),
        epoch,
        attempt,
        what,
    )


@shared_task(bind=True, name=NODE_TASK, ignore_result=True, acks_late=True)
def run_node(
    self: Task[Any, Any],
    run_id: str,
    block: int,
    epoch: int,
    input: Expr,
    nodes: list[str] | None = None,
) -> str | None:
    """Run a plan block on this worker (see the module docstring). ``nodes``, the
    block's node ids when the message carries them, let its start ride in the round
    trip that reads the run's program when this process has not compiled it yet."""
    context = run_context(self.app, settings_of(self.app))
    task_id = self.request.id or ""
    first = [True]  # a redo after a Redis outage restarts its own start: no death
    summary: list[str] = []

    def attempt() -> None:
        first_try = bool(first and first.pop())
        started = None
        if nodes and isinstance(nodes, list):
            started = _start_reading(context, run_id, block, epoch, task_id, nodes)
        execute_block(
            context,
            run_id,
            block,
            epoch,
            input,
            task_id,
            started=started,
            first_try=first_try,
            summary=summary,
        )

    retrying(context, f"run {run_id} block {block}", attempt)
    return summary[-1] if summary else None


def _start_reading(
    context: RunContext, run_id: str, bid: int, epoch: int, task_id: str, nodes: list[str]
) -> PendingStart | None:
    """If the run's program must be read, mark ``nodes`` running in the same round trip;
    the start to hand to :func:`execute_block` (None: the program was at hand)."""
    if context.has_program(run_id):
        return None
    start = context.state(run_id).pending_start(
        [str(n) for n in nodes],
        context.worker_id,
        bid,
        epoch,
        task_id,
        history.start_line(context.worker_id, nodes, epoch, redis_now(context.redis)),
        release_slot=True,
    )
    context.program(run_id, start=start)
    return start


def retrying(context: RunContext, what: str, action: Callable[[], T]) -> T:
    return through_redis_outages(context.redis, context.settings.redis_retry_s, action, what)


def _run_batched(
    context: RunContext,
    run_id: str,
    task_id: str,
    block: list[Any],
    started: PendingStart | None,
    ahead: tuple[int, int] | None,
    summary: list[str] | None = None,
) -> PendingStart | None:
    """One block of a batch, done again after a Redis outage. Only the first
    attempt uses the start that rode in the previous block's record: a redo
    marks the block running itself."""
    bid, epoch, input_expr = int(block[0]), int(block[1]), block[2]
    handed = [started]
    first = [True]

    def attempt() -> PendingStart | None:
        return execute_block(
            context,
            run_id,
            bid,
            epoch,
            input_expr,
            task_id,
            started=handed.pop() if handed else None,
            ahead=ahead,
            first_try=bool(first and first.pop()),
            summary=summary,
        )

    return retrying(context, f"run {run_id} block {bid}", attempt)


@shared_task(bind=True, name=NODE_BATCH_TASK, ignore_result=True, acks_late=True)
def run_nodes(self: Task[Any, Any], run_id: str, blocks: list[list[Any]]) -> str | None:
    """Run several ready blocks of one run here, in order; the first failure
    fails the run (the rest are then skipped) and is raised at the end."""
    context = run_context(self.app, settings_of(self.app))
    summary: list[str] = []
    first_error: Exception | None = None
    task_id = self.request.id or ""
    started: PendingStart | None = None
    for position, block in enumerate(blocks):
        ahead = None
        if position + 1 < len(blocks):
            ahead = (int(blocks[position + 1][0]), int(blocks[position + 1][1]))
        try:
            started = _run_batched(context, run_id, task_id, block, started, ahead, summary)
        except Exception as exc:
            started = None
            first_error = first_error or exc
    if first_error is not None:
        raise first_error
    return "; ".join(line for line in summary if line) or None


@shared_task(bind=True, name=INPUT_READY_TASK, ignore_result=True)
def input_ready(
    self: Task[Any, Any],
    run_id: str,
    block: int,
    epoch: int,
    ref: dict[str, Any],
    task_id: str,
    fallback: str | None = None,
) -> None:
    """One transfer for ``block`` arrived; the last one publishes the block.
    ``fallback``: why this value came through S3 after a direct pull failed (only
    sent by a worker that pulls, to itself: ``runtime.worker.pulls``)."""
    context = run_context(self.app, settings_of(self.app))
    arrival_id = self.request.id or ""
    extra = {"fallback": str(fallback)[:300]} if fallback else None
    retrying(
        context,
        f"run {run_id} input of block {block}",
        lambda: arrive(context, run_id, block, epoch, ref, task_id, arrival_id, extra=extra),
    )


def arrive(
    context: RunContext,
    run_id: str,
    block: int,
    epoch: int,
    ref: dict[str, Any],
    task_id: str,
    arrival_id: str,
    *,
    kind: str = "s3",
    extra: dict[str, Any] | None = None,
) -> None:
    """Count one arrived input of ``block``; publish the block if it was the last.
    ``kind`` and ``extra`` go into its transfer record (how the value came).

    Done again after a Redis outage (``arrival_id`` is this task's own id), the
    count is not repeated, but if it was the last the block is still published:
    the first attempt's reply may have been lost with the connection.
    """
    found = engine_for(context, run_id)
    if found is None:
        return
    engine, dispatcher = found
    state = dispatcher.state
    target = engine.program.blocks[block]
    record = transfer_record(
        ref, target, context.worker_id, kind, redis_now(context.redis), **(extra or {})
    )
    ref_key = f"{ref['node_id']}#{ref.get('iteration', 0)}"
    version = state.transfer_arrived(
        target.task_node_ids()[0], task_id, block, epoch, ref_key, record, arrival_id
    )
    if version is None:
        return  # more inputs to come, a stale chain, or a duplicate delivery
    if version != engine.program.version:  # the reaper moved nodes since
        engine, dispatcher = engine_for(context, run_id, refresh=True) or found
        target = engine.program.blocks[block]
    input_expr = state.load_input(block, epoch)
    dispatcher.publish_node(target, epoch, input_expr, task_id)


@shared_task(name=TRANSFER_FAILED_TASK, ignore_result=True)
def transfer_failed(
    request: Any,
    exc: BaseException,
    traceback: Any,
    run_id: str,
    block: int,
    epoch: int,
    task_id: str,
) -> None:
    """Errback of a transfer chain, run where the transfer failed: the run fails,
    naming the node that waited, the worker and the store's own error."""
    app = transfer_failed.app
    context = run_context(app, settings_of(app))
    found = engine_for(context, run_id)
    if found is None:
        return
    engine, dispatcher = found
    target = engine.program.blocks[block]
    node_id = target.task_node_ids()[0]
    current = dispatcher.state.client.hget(dispatcher.state.nodes, node_id)
    if current is None or json.loads(current).get("task_id") != task_id:
        return  # the block was re-dispatched since; this chain no longer matters
    error = TransferFailedError(
        f"could not move an input of node '{node_id}' to worker '{target.worker_id}': {exc}"
    )
    engine.fail(target, error, context.worker_id)
