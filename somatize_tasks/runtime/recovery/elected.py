"""One reaper for the cluster at a time, woken by what matters.

Before, every worker's reaper thread read the whole registry every
heartbeat interval, so Redis' load grew with workers x workers (about a
core at 1,000 workers). Now every worker's thread does one cheap script
call per interval (``lua/reaper_tick.lua``) and only the holder of the cluster lease
does real work:

The lease
    ``<p>:reaper:lease`` holds the leader's random token with a PX expiry
    of ``heartbeat_ttl_s``; the leader renews it every tick (compare token,
    then ``PEXPIRE``), and when it lapses (its worker died or hangs) the
    next worker to tick takes it with ``SET NX PX``. Expiry is Redis' clock,
    like liveness. A clean shutdown releases it at once.
What wakes the leader
    The same call tells the leader how many runs are active and how many
    heartbeats expired since its last tick (``ZCOUNT`` on
    ``<p>:workers:seen`` between the previous and the current cutoff, by
    Redis ``TIME``). With no active run it does nothing else; with active
    runs it sweeps them at once when a heartbeat expired or it just took
    over, and otherwise every ``heartbeat_ttl_s`` (stalled transfers, time
    limits, deadlines, nodes orphaned on live workers, nodes queued on a
    worker that left cleanly).
Housekeeping
    The leader collects expired runs (:class:`~somatize_tasks.store.gc.RunCollector`)
    every ``gc_interval_s``; every worker sweeps its own cache
    (:class:`~somatize_tasks.store.gc.CacheSweeper`) as often, leader or not.

``PlanRun.wait`` still repairs its own run, and ``somatize-tasks reaper``
still sweeps everything, so neither depends on a worker being elected.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from celery import bootsteps
from redis import Redis

from somatize_tasks.lua import script, source
from somatize_tasks.messaging.celery_app import settings_of
from somatize_tasks.runtime.engine.context import RunContext, reservations_of, run_context
from somatize_tasks.runtime.recovery.reaper import Reaper
from somatize_tasks.store.gc import CacheSweeper, RunCollector

log = logging.getLogger(__name__)

#: The tick's text, for what registers it on a client of its own (``sizing.calibrate``).
TICK_SCRIPT = source("reaper_tick")


class ReaperLoop:
    """What one worker's reaper thread does each tick (see the module docstring)."""

    def __init__(self, context: RunContext, reaper: Reaper, sweeper: CacheSweeper | None) -> None:
        settings = context.settings
        self.client: Redis[bytes] = context.redis
        self.keys = context.keys
        self.reaper = reaper
        self.sweeper = sweeper
        self.collector = RunCollector(
            context.redis, context.keys, lambda: context.store.shared, settings.run_ttl_s
        )
        self.reservations = reservations_of(context)
        self.token = uuid.uuid4().hex
        self.lease_ms = int(settings.heartbeat_ttl_s * 1000)
        self.ttl_ms = int(settings.heartbeat_ttl_s * 1000)
        self.sweep_every_s = settings.heartbeat_ttl_s
        self.gc_every_s = settings.gc_interval_s
        self.leading = False
        self._cutoff: int | None = None
        self._next_sweep = 0.0
        self._next_gc = 0.0
        self._tick = script(self.client, "reaper_tick")
        self._release = script(self.client, "release_lock")

    def tick(self) -> None:
        """One round: take or renew the lease; if leading, do what is due."""
        if self.sweeper is not None:
            self.sweeper.maybe_sweep()
        keys = [self.keys.reaper_lease, self.keys.active_runs, self.keys.workers_seen]
        args = [
            self.token,
            self.lease_ms,
            self.ttl_ms,
            "" if self._cutoff is None else self._cutoff,
        ]
        reply = self._tick(keys=keys, args=args)
        if not int(reply[0]):
            if self.leading:
                log.info("reaper lease lost; another worker reaps now")
            self.leading, self._cutoff = False, None
            return
        took_over = not self.leading
        if took_over:
            log.info("this worker is the cluster's reaper now")
        self.leading = True
        self._cutoff, active, expired = int(reply[1]), int(reply[2]), int(reply[3])
        now = time.monotonic()
        if active and (took_over or expired or now >= self._next_sweep):
            self._next_sweep = now + self.sweep_every_s
            self.reaper.sweep()
            self.reservations.prune()
        if now >= self._next_gc:
            self._next_gc = now + self.gc_every_s
            self.collector.collect(max_batches=4)

    def release(self) -> None:
        """Give the lease up now (clean shutdown), so another worker takes over at once."""
        if self.leading:
            self._release(keys=[self.keys.reaper_lease], args=[self.token])
            self.leading = False


def cache_sweeper(context: RunContext) -> CacheSweeper:
    """The sweeper of this process's own cache (``<cache_dir>/<worker id>``) and of this
    machine's RAM tier, if there is one."""
    settings = context.settings
    ram = context.store.ram
    return CacheSweeper(
        context.redis,
        context.keys,
        context.store.cache.root,
        settings.run_ttl_s,
        settings.gc_interval_s,
        ram_roots=[ram.root] if ram is not None else [],
        spares=ram.spares if ram is not None else None,
    )


_producer_sweepers: dict[int, CacheSweeper] = {}


def sweep_producer_cache(context: RunContext) -> None:
    """A producer has no reaper thread: its submissions sweep its cache (at most once
    per ``gc_interval_s``), so the inputs it stored do not outlive their runs."""
    sweeper = _producer_sweepers.get(id(context))
    if sweeper is None:
        sweeper = _producer_sweepers[id(context)] = cache_sweeper(context)
    sweeper.maybe_sweep()


class ReaperStep(bootsteps.StartStopStep):
    """Worker bootstep: a thread that ticks a :class:`ReaperLoop` every interval."""

    label = "Somatize reaper"
    requires = ("celery.worker.components:Pool",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: ReaperLoop | None = None

    def start(self, parent: Any) -> None:
        settings = settings_of(parent.app)
        context = run_context(parent.app, settings)
        sweeper = cache_sweeper(context)
        if not settings.reaper_enabled:
            self._run_thread(sweeper.maybe_sweep, settings.heartbeat_interval_s)
            return
        self._loop = ReaperLoop(context, Reaper(context, alive=[settings.worker_id]), sweeper)
        self._run_thread(self._loop.tick, settings.heartbeat_interval_s)

    def _run_thread(self, tick: Callable[[], object], interval_s: float) -> None:
        def loop() -> None:
            while not self._stop.wait(interval_s * random.uniform(0.8, 1.2)):
                try:
                    tick()
                except Exception:  # never let one bad tick end the thread
                    log.exception("reaper tick failed; retrying next interval")

        self._thread = threading.Thread(target=loop, name="somatize-reaper", daemon=True)
        self._thread.start()

    def stop(self, parent: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self._loop is not None:
            try:
                self._loop.release()
            except Exception:  # Redis gone at shutdown: the lease simply lapses
                log.warning("could not release the reaper lease (it will lapse)")
            self._loop = None

    def shutdown(self, parent: Any) -> None:
        self.stop(parent)
