"""Worker heartbeats: a bootstep in the worker's main process writes WorkerInfo.

The main process is the only one that sees every task start and end
(``celery.worker.state.active_requests`` holds a request from the moment a
pool process accepts it until it finishes, fails, is revoked or its process
is killed), so ``active_jobs`` is counted there, exactly, and never goes
negative. A thread polls that set every ``poll_s`` and writes a heartbeat
when the count changes or an interval has passed; a clean shutdown removes
the worker from the registry at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from celery import bootsteps
from celery.worker import state as worker_state
from redis.exceptions import RedisError

from scheduler import WorkerInfo
from somatize_tasks.celery_app import settings_of
from somatize_tasks.keys import NODE_TASK_PREFIX, queue_name
from somatize_tasks.machine import cpu_cores, detect_gpu
from somatize_tasks.registry import Registry

log = logging.getLogger(__name__)


def count_node_jobs(requests: Iterable[Any] | None = None) -> int:
    """How many node tasks are executing: requests of a ``somatize.node.*`` task.

    The task's own name (``type``), not ``name``: a message's shadow name
    (``node:train_svm``, what Flower shows) replaces ``name``.
    """
    source = worker_state.active_requests if requests is None else requests
    for _ in range(10):
        try:
            snapshot = list(source)
        except RuntimeError:  # the set changed under us in the main thread; look again
            continue
        return sum(
            1 for request in snapshot
            if str(getattr(request, "type", request.name)).startswith(NODE_TASK_PREFIX)
        )
    return 0


class Heart:
    """Writes ``describe(active_jobs)`` into the registry on change and every interval."""

    def __init__(
        self,
        registry: Registry,
        describe: Callable[[int], WorkerInfo],
        interval_s: float,
        count_active: Callable[[], int] = count_node_jobs,
        poll_s: float = 0.05,
    ) -> None:
        self.registry = registry
        self.describe = describe
        self.interval_s = interval_s
        self.count_active = count_active
        self.poll_s = min(poll_s, interval_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_active: int | None = None
        self._due = 0.0
        self._failing = False

    def start(self) -> None:
        """Write the first heartbeat now, then keep beating on a daemon thread."""
        self._beat(self.count_active())
        self._thread = threading.Thread(target=self._run, name="somatize-heartbeat", daemon=True)
        self._thread.start()

    def stop(self, deregister: bool = True) -> None:
        """Stop beating; with ``deregister`` the worker leaves the registry at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 5)
            self._thread = None
        if deregister:
            try:
                self.registry.deregister(self.describe(0).id)
            except RedisError as exc:
                log.warning("could not deregister worker (it will expire): %s", exc)

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                active = self.count_active()
                if active != self._last_active or time.monotonic() >= self._due:
                    self._beat(active)
            except Exception:  # the thread must outlive any one bad beat
                log.exception("heartbeat failed unexpectedly; retrying")

    def _beat(self, active: int) -> None:
        try:
            self.registry.heartbeat(self.describe(active))
        except RedisError as exc:
            # Keep trying every poll: the worker reappears as soon as Redis answers.
            if not self._failing:
                log.warning("heartbeat failed, retrying: %s", exc)
            self._failing = True
            self._due = time.monotonic() + min(1.0, self.interval_s)
            return
        if self._failing:
            log.info("heartbeat restored")
        self._failing = False
        self._last_active = active
        self._due = time.monotonic() + self.interval_s


class HeartbeatStep(bootsteps.StartStopStep):
    """Worker bootstep: registers the worker while its pool runs."""

    label = "Somatize heartbeat"
    requires = ("celery.worker.components:Pool",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.heart: Heart | None = None
        # Runs after the worker applied -Q, so its own queue is always consumed.
        parent.app.amqp.queues.select_add(queue_name(settings_of(parent.app).worker_id))

    def start(self, parent: Any) -> None:
        settings = settings_of(parent.app)
        gpu = settings.gpu if settings.gpu is not None else detect_gpu()
        cores = cpu_cores()
        max_concurrent = settings.max_concurrent or int(parent.concurrency or 1)
        name = settings.worker_name or str(parent.hostname)

        def describe(active: int) -> WorkerInfo:
            return WorkerInfo(
                id=settings.worker_id, name=name, tags=settings.worker_tags, gpu=gpu,
                cpu_cores=cores, active_jobs=active, max_concurrent=max_concurrent,
            )

        registry = Registry.from_settings(settings)
        self.heart = Heart(registry, describe, settings.heartbeat_interval_s)
        self.heart.start()
        log.info("heartbeat started for worker %r (%s)", settings.worker_id, describe(0))

    def stop(self, parent: Any) -> None:
        if self.heart is not None:
            self.heart.stop(deregister=True)
            self.heart = None

    def shutdown(self, parent: Any) -> None:
        self.stop(parent)
