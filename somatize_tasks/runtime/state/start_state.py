"""The start half of a run's state in Redis: a block starting (its attempt, the
fencing token), whether an attempt is still current, and transfers arriving
(or a direct one giving way to S3).

Kept apart from :mod:`~somatize_tasks.runtime.state.redis_state` so each half reads
in one sitting; every method here is one round trip (a Lua script), and a batch's
next start can ride on the record before it (:mod:`.starts`).

Loop passes start here too (:class:`PassState`), and end. Every pass of a loop is an
epoch of its own (``e:<epoch>`` in the run's ``results`` hash: the loop, its
enclosing pass, its number and the pass before it), and every block that runs in it
keeps working fields under that epoch: its record (``b:``), attempts (``a:``), saved
input (``i:``), pending and arrived transfers (``p:``, ``t:``), recomputations
(``rn:``, ``rw:``, ``rc:``) and a Parallel's join (``jn:``, ``jt:``, ``j:``). Kept
for ever, a loop with a huge cap grew by a set of them per pass (49,618 fields after
60 s, Redis memory rising linearly).

What later nodes or the carry still read lives elsewhere: outputs in ``latest``
(one per node), loop signals by node, the carry in the loop node's latest value.
So when pass k of a loop ends, pass k-1 is forgotten (:meth:`PassState.forget_pass`),
with the passes of loops nested in it. One pass is kept as slack: by the time
pass k ends, the follow-up of pass k-1's last completion (a new pass, the next
dispatch) was recorded with its completion intent cleared, so no redo needs
pass k-1, and a recomputation of pass k's blocks (their inputs lost with a dead
worker) still finds pass k's saved inputs. A loop's last pass is left to its
enclosing pass (``z:<outer epoch>:<loop>``), forgotten with it; a top-level
loop's last pass goes when the run ends. A recomputation that would need a
forgotten pass fails its run, saying so (``runtime.recovery.recompute``).

The budget: ``SOMATIZE_RUN_MAX_PASSES`` (or ``submit_plan(max_passes=...)``), kept
in the run's meta as ``max_passes``, bounds the passes of all loops of a run
together; ``new_epoch.lua`` refuses the pass past it and the run fails naming the
loop (:data:`OVER_BUDGET`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from redis import Redis
from redis.commands.core import Script
from redis.exceptions import WatchError

from somatize_tasks.config.clock import redis_now
from somatize_tasks.runtime.state.history import MAX_EVENTS
from somatize_tasks.runtime.state.outbox_state import compact_json
from somatize_tasks.runtime.state.run_state import RUNNING, PassInfo, PassShape
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

    def swap_chain_step(
        self, nodes: list[str], task_id: str, step_id: str, steps: list[list[str]]
    ) -> bool:
        """A waiting block's transfer step ``step_id`` (a direct pull that failed) is
        replaced by ``steps`` (its S3 chain) in the status the orphan rule reads, if the
        block still waits under ``task_id``; False when it no longer does (re-dispatched,
        or the run ended): the caller then publishes nothing. Rare (a fallback), so an
        optimistic transaction rather than a script."""
        with self.client.pipeline() as pipe:
            for _ in range(50):
                try:
                    pipe.watch(self.nodes)
                    raw: Any = pipe.hget(self.nodes, nodes[0])  # watching: answers at once
                    status = json.loads(raw) if raw else {}
                    if status.get("task_id") != task_id or status.get("waiting_for") != (
                        "transfers"
                    ):
                        return False
                    chain = [p for p in status.get("chain", []) if p[1] != step_id]
                    status["chain"] = chain + steps
                    pipe.multi()
                    pipe.hset(self.nodes, mapping=dict.fromkeys(nodes, compact_json(status)))
                    pipe.execute()
                    return True
                except WatchError:
                    continue
        return False


#: What ``new_epoch`` answers for a pass past the run's budget.
OVER_BUDGET = -1
#: Fields every block keeps per pass (each ``<kind>:<block>:<epoch>``).
PER_BLOCK = ("b", "a", "i", "p", "rn", "rw", "rc")
#: Fields deleted in one ``HDEL`` at most.
HDEL_BATCH = 1000


def pass_fields(epoch: int, shape: PassShape) -> list[str]:
    """The working fields the blocks of ``shape`` may hold in pass ``epoch``."""
    fields = [f"e:{epoch}"]
    for bid, branches, _ in shape:
        fields += [f"{kind}:{bid}:{epoch}" for kind in PER_BLOCK]
        if branches:
            fields += [f"jn:{bid}:{epoch}", f"jt:{bid}:{epoch}"]
            fields += [f"j:{bid}:{epoch}:{i}" for i in range(branches)]
    return fields


class PassState:
    """Mixed into :class:`~somatize_tasks.runtime.state.redis_state.RedisRunState`."""

    client: Redis[bytes]
    run_id: str
    ttl_s: int
    meta: str
    results: str
    _new_epoch: Script

    def new_epoch(
        self, loop_bid: int, outer_epoch: int, pass_number: int, previous: int = 0
    ) -> int:
        """Number a new pass (:data:`OVER_BUDGET` past the run's pass budget)."""
        info = compact_json([loop_bid, outer_epoch, pass_number, previous])
        return int(self._new_epoch(keys=[self.results, self.meta], args=[info, self.ttl_s]))

    def epoch_info(self, epoch: int) -> PassInfo:
        raw = self.client.hget(self.results, f"e:{epoch}")
        if raw is None:
            raise LookupError(f"run {self.run_id}: unknown loop pass {epoch}")
        loop_bid, outer, number, *rest = json.loads(raw)
        return PassInfo(int(loop_bid), int(outer), int(number), int(rest[0]) if rest else 0)

    def leave_pass(self, outer_epoch: int, loop_bid: int, last_epoch: int) -> None:
        """A loop ended with pass ``last_epoch``: forget it with its enclosing pass."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hset(self.results, f"z:{outer_epoch}:{loop_bid}", last_epoch)
        pipe.expire(self.results, self.ttl_s)
        pipe.execute()

    def forget_pass(self, epoch: int, loop_bid: int, shape_of: Callable[[int], PassShape]) -> int:
        """Delete pass ``epoch`` of loop ``loop_bid`` and the passes of loops nested in
        it; how many fields went. ``shape_of(loop)`` gives a loop's pass blocks."""
        doomed: list[str] = []
        todo = [(epoch, loop_bid)]
        while todo:
            current, loop = todo.pop()
            shape = shape_of(loop)
            doomed += pass_fields(current, shape)
            nested = [bid for bid, _, is_loop in shape if is_loop]
            waited = [bid for bid, _, is_loop in shape if not is_loop]
            asked = [f"z:{current}:{n}" for n in nested] + [f"p:{b}:{current}" for b in waited]
            answers = self.client.hmget(self.results, asked) if asked else []
            for name, value in zip(asked, answers, strict=True):
                if value is None:
                    continue
                kind, first, second = name.split(":")
                if kind == "z":  # z:<this pass>:<nested loop> -> that loop's last pass
                    doomed.append(name)
                    todo.append((int(value), int(second)))
                else:  # p:<block>:<this pass>: it waited for transfers, whose markers go too
                    found = self.client.hscan_iter(self.results, match=f"t:{first}:{current}:*")
                    doomed += [field.decode() for field, _ in found]
        for start in range(0, len(doomed), HDEL_BATCH):
            self.client.hdel(self.results, *doomed[start : start + HDEL_BATCH])
        return len(doomed)
