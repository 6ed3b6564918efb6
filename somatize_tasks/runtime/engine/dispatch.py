"""Publishing task blocks to their workers' queues, with the transfers they need.

A block whose inputs all live on its worker (or travel inline) is published
at once. Otherwise each missing value gets a small Celery chain,
``upload`` (source worker's queue) -> ``download`` (target worker's queue)
-> ``input_ready`` (target queue), and the block is published by the
``input_ready`` that brings its pending-transfer counter to zero. Nothing
ever waits on a result: every step is started by the one before it. Where
both workers announced themselves as peers and the holder serves its
values (:mod:`somatize_tasks.workers.peers`), and ``SOMATIZE_TRANSFER`` is not
``s3``, the chain is a single ``pull`` on the target instead
(:mod:`~somatize_tasks.runtime.engine.transfer_chains`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

from kombu.utils.uuid import uuid

from somatize_tasks.config.clock import redis_now
from somatize_tasks.config.keys import NODE_BATCH_TASK, NODE_TASK, queue_name, run_tag
from somatize_tasks.messaging.kombu_publish import can_publish_into, publishing_into
from somatize_tasks.runtime.compile.blocks import Block
from somatize_tasks.runtime.compile.program import Program
from somatize_tasks.runtime.compile.values import Expr, refs_in
from somatize_tasks.runtime.engine.context import PRODUCER, RunContext
from somatize_tasks.runtime.engine.transfer_chains import TransferChain, transfer_record
from somatize_tasks.runtime.state.outbox_state import MAX_TRANSFERS, Dispatch
from somatize_tasks.runtime.state.redis_state import RedisRunState
from somatize_tasks.workers.peers import Peer, read_peers

#: A worker's ready blocks go out in at least this many messages (when there are
#: that many), so a batch never leaves its worker's other slots idle.
BATCH_SPREAD = 4
#: A long publish checks every this many messages that the run is still active,
#: and stops once it has failed or been cancelled.
STILL_ACTIVE_EVERY = 32
#: Up to this many ready messages ride in their records' transaction; more are
#: published one by one after it, so the first starts while the rest are built
#: (folding 32 held a 2,000-branch fan-out's first message back ~20 ms).
FOLD_SENDS_MAX = 8
#: A wide fan-out is recorded and published this many blocks at a time (``_flush``).
FLUSH_BLOCKS = 4096
#: A node message names its block's node ids when it has at most this many (see
#: ``tasks.run_node``); a long fused chain's start goes the usual way.
START_NODES_MAX = 16


class CeleryDispatcher:
    """The engine's dispatcher for distributed runs."""

    def __init__(
        self,
        context: RunContext,
        run_id: str,
        program: Program,
        state: RedisRunState,
        *,
        unavailable: set[str] | frozenset[str] = frozenset(),
    ) -> None:
        self.context = context
        self.run_id = run_id
        self.program = program
        self.state = state
        # Sources that need no upload step: the producer put its values in the
        # shared store itself, and the reaper checked that whatever it still
        # needs from a dead worker is there. Any other source uploads first.
        self._no_upload: set[str | None] = {None, PRODUCER, *unavailable}
        self._avoiding = {"avoiding": sorted(unavailable)} if unavailable else {}
        self._held: list[tuple[Block, int, Expr]] | None = None
        self._peers: dict[str, Peer | None] = {}
        self._depth = 0
        #: Writes that go first in the next records transaction: ``submit_plan`` puts
        #: the run's own record there, so a run and its first block cost one round trip.
        self.prelude: Callable[[Any], None] | None = None

    @contextmanager
    def together(self) -> Iterator[None]:
        """Blocks dispatched inside go out together when the outermost block ends:
        those of one worker that need no transfer several to a message, with one
        Redis pipeline for all their records."""
        if self._depth == 0:
            self._held = []
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                held, self._held = self._held or [], None
                self._flush(held)

    def dispatch(self, block: Block, epoch: int, input_expr: Expr) -> None:
        """Publish ``block`` (after the transfers it needs) under a fresh task id.

        The input is saved and the task id recorded first, so the reaper can
        re-dispatch the block elsewhere, and a stale copy of the message
        (``mark_running`` compares task ids) is dropped instead of run twice.
        """
        if self._held is not None:
            self._held.append((block, epoch, input_expr))
            return
        self._dispatch_one(block, epoch, input_expr)

    def _records(self) -> Any:
        """A transaction for dispatch records, the :attr:`prelude` first if there is one."""
        records = self.state.client.pipeline()
        prelude, self.prelude = self.prelude, None
        if prelude is not None:
            prelude(records)
        return records

    def _dispatch_one(self, block: Block, epoch: int, input_expr: Expr) -> None:
        records = self._records()
        task_id, chains = self._record_one(block, epoch, input_expr, records)
        send = partial(self._send, block, epoch, input_expr, task_id)
        if not chains and self._sent_with(records, send, [(block.index, epoch)]):
            return
        records.execute()
        self._publish_one(block, epoch, input_expr, task_id, chains)
        self.state.sent([(block.index, epoch)])

    def _record_one(
        self, block: Block, epoch: int, input_expr: Expr, records: Any
    ) -> tuple[str, list[TransferChain]]:
        """Record ``block`` as dispatched (into ``records``): its task id, and the
        transfer chains it waits for (their step ids in its status)."""
        worker = block.worker_id or ""
        missing, direct = self._classify(input_expr, worker)
        task_id = uuid()
        chains = [self._chain(ref, worker) for ref in missing]
        status = self._pending(block, epoch, task_id, waiting_for="transfers" if missing else None)
        now = status["queued_at"]
        if chains:
            status["chain"] = [pair for c in chains for pair in c.watched()]
        self.state.record_dispatch(
            block.task_node_ids(),
            block.index,
            epoch,
            input_expr,
            status,
            missing=len(missing),
            pipe=records,
            transfer_records=[transfer_record(r, block, worker, kind, now) for r, kind in direct],
        )
        return task_id, chains

    def _sent_with(
        self, records: Any, send: Callable[..., None], blocks: list[tuple[int, int]]
    ) -> bool:
        """Publish ``blocks`` (``send(producer=...)``) in their records' own transaction,
        when the broker is the Redis the run lives in (kombu_publish): records,
        messages, ``task-sent`` events and the outbox's "sent" in one round trip, the
        records first. False (nothing done) when it cannot: the caller records, then
        publishes."""
        settings = self.context.settings
        if settings.broker != settings.redis_url:
            return False
        with self.context.app.producer_or_acquire() as producer:
            if not can_publish_into(producer):
                return False
            with publishing_into(producer, records):
                send(producer=producer)
            self.state.sent(blocks, pipe=records)
            records.execute()
        return True

    def _publish_one(
        self,
        block: Block,
        epoch: int,
        input_expr: Expr,
        task_id: str,
        chains: list[TransferChain],
    ) -> None:
        if not chains:
            self._send(block, epoch, input_expr, task_id)
        for transfer in chains:
            transfer.signature(self.context.app, self.run_id, block, epoch, task_id).apply_async()

    def _flush(self, held: list[tuple[Block, int, Expr]]) -> None:
        """The held blocks are recorded and published :data:`FLUSH_BLOCKS` at a time
        (memory stays bounded however wide the fan-out): each slice in one
        transaction, then its messages. The completion intent that made them ready
        goes with the last slice's records, so a process that dies in between
        leaves it for the reaper, which dispatches them all again (the messages
        already out are then stale, and refused)."""
        if not held:
            return
        if len(held) == 1:
            self._dispatch_one(*held[0])
            return
        intent = self.state.intent
        logged_from = len(held) - MAX_TRANSFERS  # the log keeps the newest records only
        for start in range(0, len(held), FLUSH_BLOCKS):
            if start and not self.state.is_active():
                return  # the run failed or was cancelled meanwhile: the rest never goes out
            last = start + FLUSH_BLOCKS >= len(held)
            self.state.intent = intent if last else None
            self._flush_slice(held[start : start + FLUSH_BLOCKS], start >= logged_from)

    def _flush_slice(self, held: list[tuple[Block, int, Expr]], logged: bool = True) -> None:
        """Every block of ``held`` recorded in one transaction, then published
        (``logged``: with the records of their inputs that cross workers inline)."""

        records = self._records()
        now = redis_now(self.state.client)
        singles = []
        ready: dict[str, list[tuple[Block, int, Expr]]] = {}
        direct: dict[int, list[str]] = {}
        for item in held:
            block, epoch, input_expr = item
            worker = block.worker_id or ""
            missing, inline = self._classify(input_expr, worker)
            if missing:
                singles.append((item, *self._record_one(block, epoch, input_expr, records)))
                continue
            ready.setdefault(worker, []).append(item)
            direct[id(item)] = (
                [transfer_record(r, block, worker, kind, now) for r, kind in inline]
                if logged
                else []
            )
        batches = [b for items in ready.values() for b in _split(items, self._batch_max)]
        sends = []
        dispatches: list[Dispatch] = []
        for batch in batches:
            task_id = uuid()
            for item in batch:
                block, epoch, input_expr = item
                status = self._pending(block, epoch, task_id, now=now)
                nodes = block.task_node_ids()
                dispatches.append((nodes, block.index, epoch, input_expr, status, direct[id(item)]))
            sends.append((batch, task_id))
        if dispatches:
            self.state.record_dispatches(dispatches, records)
        if not singles and len(sends) <= FOLD_SENDS_MAX:  # a few messages: fold them in
            blocks = [(block.index, epoch) for batch, _ in sends for block, epoch, _ in batch]
            if self._sent_with(records, partial(self._send_each, sends), blocks):
                return
        records.execute()
        for (block, epoch, input_expr), task_id, chains in singles:
            self._publish_one(block, epoch, input_expr, task_id, chains)
        if singles:
            self.state.sent([(block.index, epoch) for (block, epoch, _), _, _ in singles])
        if sends:
            self._send_all(sends)

    def _send_all(self, sends: list[tuple[list[tuple[Block, int, Expr]], str]]) -> None:
        with self.context.app.producer_or_acquire() as producer:
            for number, (batch, task_id) in enumerate(sends):
                if number and number % STILL_ACTIVE_EVERY == 0 and not self.state.is_active():
                    sends = sends[:number]  # the run failed or was cancelled meanwhile
                    break
                self._send_each([(batch, task_id)], producer)
        self.state.sent([(block.index, epoch) for batch, _ in sends for block, epoch, _ in batch])

    def _send_each(
        self, sends: list[tuple[list[tuple[Block, int, Expr]], str]], producer: Any
    ) -> None:
        for batch, task_id in sends:
            if len(batch) == 1:
                block, epoch, input_expr = batch[0]
                self._send(block, epoch, input_expr, task_id, producer=producer)
            else:
                self._send_batch(batch, task_id, producer)

    @property
    def _batch_max(self) -> int:
        return self.context.settings.dispatch_batch_max

    def publish_node(self, block: Block, epoch: int, input_expr: Expr, task_id: str) -> None:
        """The block's transfers are done: publish it under the task id it waits for."""
        self.state.set_status(
            block.task_node_ids(), self._pending(block, epoch, task_id), outbox=True
        )
        self._send(block, epoch, input_expr, task_id)
        self.state.sent([(block.index, epoch)])

    def wait_for_recompute(
        self, block: Block, epoch: int, producers: list[tuple[int, int]]
    ) -> None:
        """``block`` waits for lost inputs to be computed again by ``producers``."""
        self.state.await_recompute(block.index, epoch, producers)
        status = self._pending(block, epoch, uuid(), waiting_for="recompute")
        self.state.set_status(block.task_node_ids(), status)

    def _pending(
        self,
        block: Block,
        epoch: int,
        task_id: str,
        waiting_for: str | None = None,
        now: float | None = None,
    ) -> dict[str, Any]:
        """The status of a block published (or about to be) under ``task_id``."""
        status: dict[str, Any] = {
            "state": "pending",
            "worker": block.worker_id,
            "block": block.index,
            "epoch": epoch,
            "task_id": task_id,
            "queued_at": redis_now(self.state.client) if now is None else now,  # one clock
            **self._avoiding,
        }
        if waiting_for:
            status["waiting_for"] = waiting_for
        return status

    def _send(
        self, block: Block, epoch: int, input_expr: Expr, task_id: str, producer: Any = None
    ) -> None:
        nodes = block.task_node_ids()
        soft_s, hard_s = _scaled(self.program.time_limits_s, len(nodes))
        kwargs = {"run_id": self.run_id, "block": block.index, "epoch": epoch, "input": input_expr}
        if len(nodes) <= START_NODES_MAX:  # its start can ride with the program's read
            kwargs["nodes"] = nodes
        self.context.app.send_task(
            NODE_TASK,
            kwargs=kwargs,
            queue=queue_name(block.worker_id or ""),
            task_id=task_id,
            kwargsrepr=_describe(self.run_id, nodes, epoch),
            shadow=node_shadow(nodes, self.run_id),
            soft_time_limit=soft_s,  # type: ignore[arg-type]  # floats work; the stubs say int
            time_limit=hard_s,  # type: ignore[arg-type]
            ignore_result=True,
            producer=producer,
        )

    def _send_batch(
        self, batch: list[tuple[Block, int, Expr]], task_id: str, producer: Any
    ) -> None:
        nodes = [n for block, _, _ in batch for n in block.task_node_ids()]
        soft_s, hard_s = _scaled(self.program.time_limits_s, len(nodes))
        self.context.app.send_task(
            NODE_BATCH_TASK,
            kwargs={
                "run_id": self.run_id,
                "blocks": [[block.index, epoch, expr] for block, epoch, expr in batch],
            },
            queue=queue_name(batch[0][0].worker_id or ""),
            task_id=task_id,
            kwargsrepr=_describe(self.run_id, nodes, batch[0][1]),
            shadow=node_shadow(nodes, self.run_id),
            soft_time_limit=soft_s,  # type: ignore[arg-type]
            time_limit=hard_s,  # type: ignore[arg-type]
            ignore_result=True,
            producer=producer,
        )

    def run_finished(self, status: str, output: Expr | None) -> None:
        """Nothing to publish: waiters watch the run's state in Redis."""

    # --- transfers -------------------------------------------------------------------

    def _chain(self, ref: dict[str, Any], target: str) -> TransferChain:
        """How ``ref`` reaches ``target``: from the shared store when it is there
        already, pulled from its holder when both can, else up to S3 and down."""
        source = ref.get("worker_id")
        if source in self._no_upload:
            return TransferChain.plan(ref, target, upload=False)
        if self._pulls(str(source), target):
            return TransferChain.pull(ref, target)
        return TransferChain.plan(ref, target, upload=True)

    def _pulls(self, source: str, target: str) -> bool:
        """Whether ``target`` can pull from ``source``: direct transfers are on, the
        target knows the pull task and the source serves (one read per dispatcher)."""
        if self.context.settings.transfer == "s3":
            return False
        unknown = {source, target} - set(self._peers)
        if unknown:
            self._peers.update(read_peers(self.state.client, self.context.keys, unknown))
        holder, reader = self._peers.get(source), self._peers.get(target)
        return reader is not None and holder is not None and holder.address is not None

    def _classify(
        self, input_expr: Expr, worker: str
    ) -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any], str]]]:
        """Refs the block's worker must fetch first (a transfer chain), and the ones
        crossing workers without one: inline (``direct``), or already in a shared
        directory (``cached``: the node links it in when it reads it)."""
        missing: dict[str, dict[str, Any]] = {}
        crossing: list[tuple[dict[str, Any], str]] = []
        shared = self.context.store.shares_on_write
        for ref in refs_in(input_expr):
            if ref.get("worker_id") == worker:
                continue
            if ref.get("inline") is not None:
                crossing.append((ref, "direct"))
            elif shared:
                crossing.append((ref, "cached"))
            else:
                missing.setdefault(f"{ref['node_id']}#{ref.get('iteration', 0)}", ref)
        return list(missing.values()), crossing


def node_shadow(nodes: list[str], run_id: str) -> str:
    """The name Flower lists a node task under, with its run (``node:train_svm
    run:1a2b3c``; ``node:a+b`` for a block or batch of several, ``node:a+b+c+5 more``
    past four); the task itself stays ``somatize.node.run`` (or ``.batch``), so routing
    never depends on it."""
    shown = nodes if len(nodes) <= 4 else [*nodes[:3], f"{len(nodes) - 3} more"]
    return "node:" + "+".join(shown) + " " + run_tag(run_id)


def _scaled(
    limits: tuple[float | None, float | None], nodes: int
) -> tuple[float | None, float | None]:
    """Per-node time limits for a task that runs ``nodes`` nodes (a fused chain)."""
    return tuple(None if limit is None else limit * nodes for limit in limits)  # type: ignore[return-value]


def _split(items: list[Any], most: int) -> list[list[Any]]:
    """``items`` in about equal batches of at most ``most``, at least ``BATCH_SPREAD``
    of them when there are that many items."""
    count = min(len(items), max(math.ceil(len(items) / most), BATCH_SPREAD))
    size = math.ceil(len(items) / count)
    return [items[i : i + size] for i in range(0, len(items), size)]


def _describe(run_id: str, nodes: list[str], epoch: int) -> str:
    """What Flower shows for a node task's arguments: ids, never values."""
    shown = nodes[0] if len(nodes) == 1 else "+".join(nodes[:8])
    if len(nodes) > 8:
        shown += f" (+{len(nodes) - 8} more)"
    suffix = f" pass={epoch}" if epoch else ""
    return f"run={run_id} node={shown}{suffix}"
