"""Worker heartbeats: a bootstep in the worker's main process writes WorkerInfo.

The main process is the only one that sees every task start and end
(``celery.worker.state.active_requests`` holds a request from the moment a
pool process accepts it until it finishes, fails, is revoked or its process
is killed), so ``active_jobs`` is counted there, exactly, and never goes
negative. A thread polls that set every ``poll_s`` and writes a heartbeat
when the count changes or an interval has passed; a clean shutdown removes
the worker from the registry at once.

Each heartbeat also reports the ids of the node tasks (and transfer steps) this worker holds
(reserved, waiting for their ETA, or running: ``celery.worker.state.requests``),
so the reaper can tell a node ``running`` or ``pending`` on a live worker
that no longer has its message (see :mod:`somatize_tasks.runtime.recovery.orphans`).

The same bootstep starts the worker's value server (direct transfers,
:mod:`somatize_tasks.transfer.peer_server`) and announces its address with
the worker's message keys (:mod:`somatize_tasks.workers.peers`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from celery import bootsteps
from celery.worker import state as worker_state
from redis.exceptions import RedisError

from scheduler import WorkerInfo
from somatize_tasks.config.clock import settings_now
from somatize_tasks.config.keys import (
    INPUT_READY_TASK,
    NODE_TASK_PREFIX,
    TRANSFER_TASK_PREFIX,
    queue_name,
)
from somatize_tasks.config.settings import Settings
from somatize_tasks.messaging.celery_app import settings_of
from somatize_tasks.messaging.replay import instance_id
from somatize_tasks.messaging.signing import accepted_key_ids, verification_keys
from somatize_tasks.transfer import store_for
from somatize_tasks.transfer.peer_server import ValueServer, start_server
from somatize_tasks.workers import peers
from somatize_tasks.workers.identity import ClashWarnings
from somatize_tasks.workers.machine import cpu_cores, detect_gpu
from somatize_tasks.workers.registry import Registry

log = logging.getLogger(__name__)


#: At most this many task ids in one report; a worker holding more reports none
#: (the reaper then does not judge its nodes orphaned).
MAX_REPORTED_TASKS = 1000


#: The tasks a report names: node tasks, and the steps of transfer chains (a block
#: waiting for its inputs is judged by its chain's steps: runtime.transfer_chains).
REPORTED_PREFIXES = (NODE_TASK_PREFIX, TRANSFER_TASK_PREFIX, INPUT_READY_TASK)


def _requests(source: Iterable[Any], prefixes: tuple[str, ...]) -> list[Any]:
    """The requests in ``source`` of tasks named with one of ``prefixes``, by the
    task's own name (``type``), not ``name``: a message's shadow name
    (``node:train_svm``, what Flower shows) replaces ``name``."""
    for _ in range(10):
        try:
            snapshot = list(source)
        except RuntimeError:  # the set changed under us in the main thread; look again
            continue
        return [
            request
            for request in snapshot
            if str(getattr(request, "type", request.name)).startswith(prefixes)
        ]
    return []


def count_node_jobs(requests: Iterable[Any] | None = None) -> int:
    """How many node tasks are executing (``active_requests``)."""
    source = worker_state.active_requests if requests is None else requests
    return len(_requests(source, (NODE_TASK_PREFIX,)))


def held_node_tasks(requests: Iterable[Any] | None = None) -> tuple[str, ...] | None:
    """The ids of every node and transfer-chain task this worker holds (reserved,
    scheduled or running), sorted; None when there are more than
    :data:`MAX_REPORTED_TASKS`."""
    source = worker_state.requests.values() if requests is None else requests
    ids = sorted({str(request.id) for request in _requests(source, REPORTED_PREFIXES)})
    return None if len(ids) > MAX_REPORTED_TASKS else tuple(ids)


class Heart:
    """Writes ``describe(active_jobs)`` and the held task ids into the registry on
    change and every interval."""

    def __init__(
        self,
        registry: Registry,
        describe: Callable[[int], WorkerInfo],
        interval_s: float,
        count_active: Callable[[], int] = count_node_jobs,
        poll_s: float = 0.05,
        held_tasks: Callable[[], tuple[str, ...] | None] = held_node_tasks,
        on_restored: Callable[[], None] = lambda: None,
        instance: str = "",
    ) -> None:
        self.registry = registry
        #: This process (``workers.identity``): a beat that replaces another live
        #: process's under the same id says so in the log.
        self.instance = instance
        self._clashes: ClashWarnings | None = None
        #: Called after a beat that follows failed ones: Redis may have lost what
        #: the worker wrote only once (a restart without persistence).
        self.on_restored = on_restored
        self.describe = describe
        self.interval_s = interval_s
        self.count_active = count_active
        self.held_tasks = held_tasks
        self.poll_s = min(poll_s, interval_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: tuple[int, tuple[str, ...] | None] | None = None
        self._due = 0.0
        self._failing = False

    def start(self) -> None:
        """Write the first heartbeat now, then keep beating on a daemon thread."""
        self._beat(self._look())
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
                seen = self._look()
                if seen != self._last or time.monotonic() >= self._due:
                    self._beat(seen)
            except Exception:  # the thread must outlive any one bad beat
                log.exception("heartbeat failed unexpectedly; retrying")

    def _look(self) -> tuple[int, tuple[str, ...] | None]:
        return self.count_active(), self.held_tasks()

    def _beat(self, seen: tuple[int, tuple[str, ...] | None]) -> None:
        active, tasks = seen
        info = self.describe(active)
        try:
            beat = self.registry.beat(info, tasks, self.instance)
        except RedisError as exc:
            # Keep trying every poll: the worker reappears as soon as Redis answers.
            if not self._failing:
                log.warning("heartbeat failed, retrying: %s", exc)
            self._failing = True
            self._due = time.monotonic() + min(1.0, self.interval_s)
            return
        if beat.clash:
            if self._clashes is None:
                self._clashes = ClashWarnings(info.id, self.instance)
            self._clashes.saw(beat.clash)
        if self._failing:
            log.info("heartbeat restored")
            self.on_restored()
        self._failing = False
        self._last = seen
        self._due = time.monotonic() + self.interval_s


class HeartbeatStep(bootsteps.StartStopStep):
    """Worker bootstep: registers the worker while its pool runs."""

    label = "Somatize heartbeat"
    requires = ("celery.worker.components:Pool",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.heart: Heart | None = None
        self.server: ValueServer | None = None
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
                id=settings.worker_id,
                name=name,
                tags=settings.worker_tags,
                gpu=gpu,
                cpu_cores=cores,
                active_jobs=active,
                max_concurrent=max_concurrent,
            )

        registry = Registry.from_settings(settings)
        self.server = serve(settings)
        address = None
        if self.server is not None:
            address = peers.peer_address(peers.advertised_host(settings), self.server.port)
            log.info("serving values to other workers on %s", address)

        def announce() -> None:  # producers check it before submitting (signing.refusing_workers)
            try:
                registry.announce_keys(settings.worker_id, accepted_key_ids(settings))
                peers.announce(registry.client, registry.keys, settings.worker_id, address)
            except RedisError as exc:
                log.warning("could not announce this worker's message keys and address: %s", exc)

        self.heart = Heart(
            registry,
            describe,
            settings.heartbeat_interval_s,
            on_restored=announce,
            instance=instance_id(),
        )
        self.heart.start()
        announce()
        log.info("heartbeat started for worker %r (%s)", settings.worker_id, describe(0))

    def stop(self, parent: Any) -> None:
        if self.heart is not None:
            self.heart.stop(deregister=True)
            self.heart = None
        if self.server is not None:
            self.server.stop()
            self.server = None

    def shutdown(self, parent: Any) -> None:
        self.stop(parent)


def serve(settings: Settings) -> ValueServer | None:
    """This worker's value server, started; None (said once in the log) when it serves
    nothing: values then leave it through S3 only."""
    why_not = peers.serves(settings)
    if why_not is None:
        server = start_server(
            store_for(settings),
            verification_keys(settings),
            settings.serve_bind,
            settings.serve_port,
            settings.peer_timeout_s,
            on_error=lambda exc: log.warning(
                "cannot serve values on %s:%d (%s)", settings.serve_bind, settings.serve_port, exc
            ),
            clock=partial(settings_now, settings),  # grants expire on Redis' clock
        )
        if server is not None:
            return server
        why_not = "its port could not be bound"
    log.info("this worker serves no values to others (%s): they leave it through S3", why_not)
    return None
