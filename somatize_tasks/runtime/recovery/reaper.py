"""The reaper: runs survive a worker's death, and end when they cannot.

Celery on Redis strands work in a dead worker's queue (nothing else reads
it, and an unacked message only comes back to that same queue). So a run
is repaired from its own state, not from the broker.

Who watches
    The one worker holding the cluster's reaper lease sweeps every active
    run (:mod:`somatize_tasks.runtime.recovery.elected`), each producer's
    ``PlanRun.wait`` repairs its own run, and ``somatize-tasks reaper``
    runs one on its own. A lease per run (``<p>:run:<id>:lease``,
    ``SET NX PX``) lets one of them repair a run at a time; the others skip
    it. A healthy run costs one round trip per sweep.
What ends a run (:mod:`~somatize_tasks.runtime.recovery.reaper_checks`)
    A node running past its hard time limit (``NodeTimeLimitExceeded``);
    the run's deadline passing (``submit_plan(deadline_s=...)``:
    ``RunDeadlineExceeded``, naming every node still unfinished); nothing
    pending or running for ``transfer_stall_s`` (``RunStalled``); a block
    whose worker died while running it ``max_node_deaths`` times
    (``KilledWorker``, :mod:`~somatize_tasks.runtime.recovery.deaths`); a node that
    cannot move (pinned by ``WorkerId`` to a dead worker, or needing a tag
    no live worker has) after ``reroute_grace_s`` (``WorkerLost``).
What it dispatches again
    1. Blocks pending or running on a worker whose heartbeat expired: every
       node the dead worker held moves to a live worker
       (:mod:`~somatize_tasks.runtime.recovery.replacement`).
    2. Blocks orphaned on a live worker, with no message behind them (a
       worker restarted under its own id, a task acknowledged after a Redis
       outage, a lost message): they stay on their worker
       (:mod:`~somatize_tasks.runtime.recovery.orphans` has the rule).
    3. Blocks waiting for a transfer from a dead worker, or for too long.
    4. What a dead dispatcher recorded but never published, and the
       follow-up of a completion whose process died before recording it
       (its intent; :mod:`~somatize_tasks.runtime.recovery.outbox`).
    Each goes out under a new task id; an input that lived only in a dead
    worker's cache is recomputed first (:mod:`~somatize_tasks.runtime.recovery.recompute`).
    The dead worker's queue is left alone: a stale copy of an old message
    that runs later anyway is refused by ``mark_running`` (task id
    mismatch), and if a duplicate completes anyway, the first result
    recorded wins.
Keeping state alive
    A run's keys carry the run TTL from the moment it is created; a sweep
    renews them when less than half of it is left, so a run that outlasts
    ``run_ttl_s`` keeps its state while a reaper watches it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from collections.abc import Container, Iterable
from typing import Any

from redis import Redis

from scheduler import WorkerInfo
from somatize_tasks.config.clock import redis_now
from somatize_tasks.errors import StrandedError
from somatize_tasks.lua import script
from somatize_tasks.runtime.compile.program import Program
from somatize_tasks.runtime.engine.context import RunContext
from somatize_tasks.runtime.engine.dispatch import CeleryDispatcher
from somatize_tasks.runtime.engine.engine import Engine
from somatize_tasks.runtime.engine.revoke import revoke_unfinished
from somatize_tasks.runtime.recovery import reaper_checks as checks
from somatize_tasks.runtime.recovery.deaths import (
    fail_for_deaths,
    killed_worker,
    record_deaths,
    stopped_by_time_limit,
)
from somatize_tasks.runtime.recovery.orphans import OrphanWatch
from somatize_tasks.runtime.recovery.outbox import (
    outbox_grace,
    redo_follow_up,
    stale_intents,
    unsent_blocks,
)
from somatize_tasks.runtime.recovery.recompute import Redispatcher, describe_blocks
from somatize_tasks.runtime.recovery.replacement import replace_dead
from somatize_tasks.runtime.state.redis_state import RedisRunState
from somatize_tasks.workers.registry import Registry

log = logging.getLogger(__name__)

_META = ("status", "created_at", "time_limits", "deadline_at", "deadline_s", "max_node_deaths")


class Reaper:
    """Repairs the runs of one Redis/key prefix; safe to run in many processes at once."""

    def __init__(
        self, context: RunContext, owner: str | None = None, *, alive: Iterable[str] = ()
    ) -> None:
        self.context = context
        self.settings = context.settings
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"
        # A worker's own reaper never takes its own worker for dead, even before
        # its first heartbeat is visible (a worker restarted under the same id).
        self.alive = frozenset(alive)
        self.registry = Registry.from_settings(context.settings, context.redis)
        self.orphans = OrphanWatch(self.registry, context.redis, self.settings.heartbeat_ttl_s)
        self._release = script(context.redis, "release_lock")
        #: Whether this sweep takes expired heartbeats for dead workers (see
        #: :meth:`judges_deaths`; read once with the live workers).
        self.judging_deaths = True

    def sweep(self) -> list[str]:
        """Repair every active run that needs it; the ids of the runs repaired."""
        live = self._live()
        raw = self.context.redis.smembers(self.context.keys.active_runs)
        if raw:
            self.judging_deaths = self.judges_deaths()  # once a sweep, not once a run
        active = {run_id.decode() for run_id in raw}
        self.orphans.forget_runs_except(active)
        self.orphans.new_sweep()
        return [run_id for run_id in sorted(active) if self.repair(run_id, live)]

    def repair(self, run_id: str, live: dict[str, WorkerInfo] | None = None) -> bool:
        """Repair one run if no other watcher holds its lease; True if anything moved."""
        lease = self.context.keys.run(run_id, "lease")
        lease_ms = int(max(10.0, 5 * self.settings.heartbeat_ttl_s) * 1000)
        if not self.context.redis.set(lease, self.owner, nx=True, px=lease_ms):
            return False
        if live is None:  # a repair of its own, not part of a sweep
            live = self._live()
            self.judging_deaths = self.judges_deaths()
            self.orphans.new_sweep()
        try:
            return _Repair(self, run_id, live).run()
        finally:
            self._release(keys=[lease], args=[self.owner])

    def _live(self) -> dict[str, WorkerInfo]:
        return {info.id: info for info in self.registry.live_infos()}

    def judges_deaths(self) -> bool:
        """Whether an expired heartbeat means a dead worker now. Not while Redis is
        younger than two heartbeat TTLs: after a restart (with its data kept),
        every heartbeat looks expired until its worker reconnects and beats again,
        and re-placing live workers' nodes then only duplicates their work."""
        uptime_s = self.context.redis.info("server").get("uptime_in_seconds")
        ttl_s = self.settings.heartbeat_ttl_s
        return uptime_s is None or float(uptime_s) >= max(2 * ttl_s, ttl_s + 2)


class _Everyone:
    """Every worker counts as alive (Redis just restarted: see ``judges_deaths``)."""

    def __contains__(self, worker: object) -> bool:
        return True


class _Repair:
    """One repair of one run (see the module docstring)."""

    def __init__(self, reaper: Reaper, run_id: str, live: dict[str, WorkerInfo]) -> None:
        self.reaper = reaper
        self.settings = reaper.settings
        self.context = reaper.context
        self.run_id = run_id
        self.live = live
        self.alive: Container[str] = (
            set(live) | reaper.alive if reaper.judging_deaths else _Everyone()
        )
        self.state: RedisRunState = reaper.context.state(run_id)
        self.redis: Redis[bytes] = reaper.context.redis

    def run(self) -> bool:
        """Look at the run's state (one round trip when all is well); repair if needed.

        The plan is loaded and compiled only when something must move, so a
        sweep over many healthy runs stays cheap.
        """
        pipe = self.redis.pipeline()
        pipe.hmget(self.state.meta, *_META)
        pipe.ttl(self.state.meta)
        pipe.hgetall(self.state.nodes)
        pipe.hlen(self.state.outbox)
        meta_values, ttl_left, raw_nodes, in_outbox = pipe.execute()
        meta = dict(zip(_META, meta_values, strict=True))
        if meta["status"] != b"running":
            self.redis.srem(self.context.keys.active_runs, self.run_id)
            return False
        if 0 <= ttl_left < self.state.ttl_s / 2:
            self.state.keep_alive()
        nodes = {k.decode(): json.loads(v) for k, v in raw_nodes.items()}
        hard_limit_s = json.loads(meta["time_limits"] or b"[null, null]")[1]
        failure = self._failure(meta, nodes, hard_limit_s)
        if failure is not None:
            if self._fail(failure) and failure.kind == "RunDeadlineExceeded":
                revoke_unfinished(self.context.app, raw_nodes.values())  # free their slots
            return True
        if in_outbox and (self._resume_intents() or self._publish_unsent(nodes)):
            return True
        return self._dispatch_again(nodes, int(meta["max_node_deaths"] or 0), hard_limit_s)

    def _failure(
        self, meta: dict[str, Any], nodes: checks.Nodes, hard_limit_s: float | None
    ) -> checks.Failure | None:
        """The first rule that ends the run now, if any (judged on Redis' clock, which
        every stamp it compares was written with: config.clock)."""
        now = redis_now(self.redis)
        slack_s = 2 * self.settings.heartbeat_ttl_s
        deadline_at = float(meta["deadline_at"]) if meta["deadline_at"] else None
        if deadline_at is not None and now >= deadline_at:
            node_ids = json.loads(self.redis.hget(self.state.meta, "node_ids") or b"[]")
            return checks.past_deadline(
                self.run_id, deadline_at, float(meta["deadline_s"] or 0), nodes, node_ids, now
            )
        return checks.overdue(hard_limit_s, nodes, now, slack_s) or checks.stalled(
            self.run_id,
            float(meta["created_at"] or 0),
            nodes,
            now,
            self.settings.transfer_stall_s,
        )

    def _dispatch_again(
        self, nodes: checks.Nodes, max_deaths: int, hard_limit_s: float | None
    ) -> bool:
        """Stranded, orphaned and starved blocks go out again (module docstring, 1-3)."""
        stranded = checks.stranded(nodes, self.alive)
        orphaned = self.reaper.orphans.orphaned(self.run_id, nodes, set(self.live))
        stall_before = redis_now(self.redis) - self.settings.transfer_stall_s
        hungry = checks.starved(self.state, nodes, self.alive, stall_before)
        starved = hungry.blocks
        if not stranded and not orphaned and not starved:
            return False
        if self._killed_too_often(nodes, [*stranded, *orphaned], max_deaths, hard_limit_s):
            return True
        if self._stalled_too_often(nodes, hungry.waited):
            return True
        dead = {nodes[n]["worker"] for n in stranded} | hungry.sources
        try:
            program = self._program(dead)
        except StrandedError as exc:
            self._fail_after_grace(str(exc), dead)
            return False
        if program is None:
            return False
        blocks = {(nodes[n]["block"], nodes[n]["epoch"]) for n in [*stranded, *orphaned]}
        self._redispatch(program, sorted(blocks | starved), dead)
        why = f"dead worker(s) {', '.join(sorted(dead))}" if dead else "live workers"
        log.warning(
            "run %s: dispatched %s again (%s%s)",
            self.run_id,
            describe_blocks(program, sorted(blocks | starved)),
            why,
            f"; orphaned: {', '.join(sorted(orphaned))}" if orphaned else "",
        )
        return True

    def _stalled_too_often(self, nodes: checks.Nodes, waited: set[tuple[int, int]]) -> bool:
        """Count each block's waits that ran out; fail the run when one reached
        ``max_transfer_stalls`` (``checks.stalled_too_often``)."""
        for bid, epoch in sorted(waited):
            times = self.state.count_stall(bid, epoch)
            failure = checks.stalled_too_often(
                nodes,
                (bid, epoch),
                times,
                self.settings.max_transfer_stalls,
                self.settings.transfer_stall_s,
            )
            if failure is not None:
                self._fail(failure)
                return True
        return False

    def _program(self, dead: set[str]) -> Program | None:
        """The program to dispatch with: dead workers' nodes moved, else as it is now
        (reloaded: another watcher may have moved nodes since this process cached it)."""
        if dead:
            return replace_dead(self.context, self.run_id, dead, self.live)
        return self.context.program(self.run_id, refresh=True)

    def _killed_too_often(
        self, nodes: checks.Nodes, lost: list[str], max_deaths: int, hard_limit_s: float | None
    ) -> bool:
        """Count the deaths of the blocks that were running; fail the run if one
        reached its limit, or was stopped by its time limit (``runtime.deaths``)."""
        running = {nodes[n]["block"]: nodes[n] for n in lost if nodes[n].get("state") == "running"}
        for bid, status in running.items():
            names = [n for n, s in nodes.items() if s.get("block") == bid]
            stopped = stopped_by_time_limit(self.state, names[0], status, len(names), hard_limit_s)
            if stopped is not None:
                self._fail(stopped)
                return True
        limit = max_deaths or self.settings.max_node_deaths
        for bid, workers in record_deaths(self.state, list(running.values())).items():
            if len(workers) >= limit:
                names = sorted(n for n, s in nodes.items() if s.get("block") == bid)
                failure = killed_worker(self.run_id, names, workers, limit)
                if fail_for_deaths(self.state, failure, names, running[bid]):
                    log.error("run %s failed: %s", self.run_id, failure.message)
                return True
        return False

    def _resume_intents(self) -> bool:
        """Redo the follow-up of completions whose process died before recording it."""
        stale = stale_intents(
            self.state, outbox_grace(self.settings), self.reaper.registry.held_tasks, set(self.live)
        )
        program = self.context.program(self.run_id, refresh=True) if stale else None
        if program is None:
            return False
        engine = Engine(
            program, self.state, CeleryDispatcher(self.context, self.run_id, program, self.state)
        )
        resumed = [
            f"{program.blocks[bid].kind} block {bid} pass {epoch}"
            for (bid, epoch), entry in sorted(stale.items())
            if redo_follow_up(self.state, engine, bid, epoch, entry)
        ]
        if resumed:
            log.warning(
                "run %s: redid the follow-up of completion(s) whose process died: %s",
                self.run_id,
                ", ".join(resumed),
            )
        return bool(resumed)

    def _publish_unsent(self, nodes: checks.Nodes) -> bool:
        """Dispatch again what a dead dispatcher recorded but never published."""
        grace_s = outbox_grace(self.settings)
        program, unsent = unsent_blocks(
            self.state, lambda: self.context.program(self.run_id), nodes, grace_s
        )
        if program is None or not unsent:
            return False
        self._redispatch(program, unsent, set())
        names = sorted({n for bid, _ in unsent for n in program.blocks[bid].task_node_ids()})
        log.warning(
            "run %s: published again what a dead dispatcher never sent: %s",
            self.run_id,
            ", ".join(names),
        )
        return True

    def _redispatch(self, program: Program, blocks: list[tuple[int, int]], dead: set[str]) -> None:
        dispatcher = CeleryDispatcher(
            self.context, self.run_id, program, self.state, unavailable=dead
        )
        again = Redispatcher(self.context, self.state, program, dispatcher, self.alive)
        try:
            for bid, epoch in blocks:
                again.redispatch(program.blocks[bid], epoch)
        except LookupError as exc:  # a value to recompute came from a forgotten loop pass
            self._fail(
                checks.Failure(
                    None,
                    ",".join(sorted(dead)) or None,
                    f"{exc}: an input lived only on dead worker(s) and the loop pass that "
                    "made it is no longer kept (a loop keeps its last two passes), so it "
                    "cannot be computed again",
                    "WorkerLost",
                )
            )

    def _fail_after_grace(self, message: str, dead: Iterable[str]) -> None:
        since = self.state.first_noticed(",".join(sorted(dead)))
        grace = self.settings.reroute_grace_s
        if redis_now(self.redis) - since >= grace:
            self._fail(
                checks.Failure(
                    None,
                    ",".join(sorted(dead)),
                    f"{message} (waited {grace:g} s for it to come back)",
                    "WorkerLost",
                )
            )

    def _fail(self, failure: checks.Failure) -> bool:
        if not self.state.finish("failed", error=failure.detail()):
            return False
        log.error("run %s failed: %s", self.run_id, failure.message)
        return True
