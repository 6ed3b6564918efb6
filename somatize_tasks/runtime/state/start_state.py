"""The start half of a run's state in Redis: a block starting (its attempt, the
fencing token), whether an attempt is still current, and transfers arriving.

Kept apart from :mod:`~somatize_tasks.runtime.state.redis_state` so each half reads
in one sitting; every method here is one round trip (a Lua script), and a batch's
next start can ride on the record before it (:mod:`.starts`).
"""

from __future__ import annotations

import json

from redis import Redis
from redis.commands.core import Script

from somatize_tasks.config.clock import redis_now
from somatize_tasks.runtime.state.history import MAX_EVENTS
from somatize_tasks.runtime.state.outbox_state import compact_json
from somatize_tasks.runtime.state.run_state import RUNNING
from somatize_tasks.runtime.state.starts import PendingStart
from somatize_tasks.workers.reservations import reservation_field


class StartState:
    """Mixed into :class:`~somatize_tasks.runtime.state.redis_state.RedisRunState`."""

    client: Redis[bytes]
    run_id: str
    ttl_s: int
    meta: str
    nodes: str
    history: str
    results: str
    transfers: str
    reservations: list[str]
    start_next: PendingStart | None
    _mark_running: Script
    _transfer_arrived: Script

    def mark_running(
        self,
        nodes: list[str],
        worker_id: str,
        bid: int,
        epoch: int,
        task_id: str,
        history_line: str = "",
        *,
        release_slot: bool = False,
    ) -> int | None:
        """Nodes start: the run's distribution version, or None if this task must not run.

        None when the run ended, the block already completed, or the message
        is stale (the block was re-dispatched elsewhere under a new task id).
        With ``release_slot``, a start also gives back one slot the run
        reserved on ``worker_id`` (:mod:`somatize_tasks.workers.reservations`).
        """
        return self.start_block(
            nodes, worker_id, bid, epoch, task_id, history_line, release_slot=release_slot
        ).version

    def start_block(
        self,
        nodes: list[str],
        worker_id: str,
        bid: int,
        epoch: int,
        task_id: str,
        history_line: str = "",
        *,
        release_slot: bool = False,
    ) -> PendingStart:
        """:meth:`mark_running`, answered in full: the version, and this execution's
        attempt (its fencing token) and any earlier start of the same task."""
        start = self.pending_start(
            nodes, worker_id, bid, epoch, task_id, history_line, release_slot=release_slot
        )
        self.start_next = None
        start.settle(self._mark_running(keys=start.keys, args=start.args))
        return start

    def pending_start(
        self,
        nodes: list[str],
        worker_id: str,
        bid: int,
        epoch: int,
        task_id: str,
        history_line: str = "",
        *,
        release_slot: bool = False,
    ) -> PendingStart:
        """A :meth:`mark_running` to send with this state's next record (kept as
        :attr:`start_next`): the next block of a batch starts in that round trip."""
        status = compact_json(
            {
                "state": RUNNING,
                "worker": worker_id,
                "block": bid,
                "epoch": epoch,
                "started_at": redis_now(self.client),  # one clock: deaths, limits
                "task_id": task_id,
            }
        )
        field = reservation_field(worker_id, self.run_id) if release_slot else ""
        self.start_next = PendingStart(
            [self.meta, self.nodes, self.history, *self.reservations, self.results],
            [
                status,
                task_id,
                history_line,
                MAX_EVENTS,
                self.ttl_s,
                field,
                f"a:{bid}:{epoch}",
                *nodes,
            ],
        )
        return self.start_next

    def is_current(self, node_id: str, epoch: int, attempt: int) -> bool:
        """Whether ``attempt`` still is the node's current execution (fencing): a
        stale one's failure must not fail the run either."""
        if not attempt:
            return True
        raw = self.client.hget(self.nodes, node_id)
        status = json.loads(raw) if raw else {}
        return bool(status.get("attempt") == attempt and status.get("epoch") == epoch)

    def transfer_arrived(
        self,
        node_id: str,
        task_id: str,
        bid: int,
        epoch: int,
        ref_key: str,
        record: str,
        arrival_id: str,
    ) -> int | None:
        """Count one input in, once; the distribution version if it was the last one
        (again, to the same ``arrival_id`` doing it again while the block still waits)."""
        version = self._transfer_arrived(
            keys=[self.nodes, self.results, self.transfers, self.meta],
            args=[
                node_id,
                task_id,
                f"p:{bid}:{epoch}",
                f"t:{bid}:{epoch}:{task_id}:{ref_key}",
                record,
                arrival_id,
            ],
        )
        return None if int(version) < 0 else int(version)
