"""One process per worker id: a second one is refused at start, and caught if it runs.

Two processes started under one worker id both consume its queue and both report
under its name: nodes ran twice, and the registry showed one worker where two
were. Each heartbeat now names the process that wrote it (``host:pid:token``, kept
in ``<p>:workers:instance``), so:

At start (:func:`check_unique`, before the pool and the first heartbeat)
    no heartbeat of the id, or an expired one, or one this process wrote: start.
    A fresh one from another process is either a predecessor killed a moment ago
    (a restart) or a live twin; the worker watches it for one and a half heartbeat
    intervals (at most the TTL): a new beat from it is a twin, and this worker exits
    with one line naming the id and what to do (:class:`DuplicateWorkerIdError`);
    silence, or its expiry, is a predecessor, and this worker starts.
If two run anyway
    (started within the same instant, a twin resumed after a long pause, or a
    version from before this check) every heartbeat that replaces a fresh one of
    another process records a clash (``<p>:workers:clash``, ``heartbeat.lua``) and
    reports no held tasks (one twin's report would hide the other's, and the orphan
    rule would run their nodes again; unreported, the id is not judged): both
    workers log a warning at most once a minute (:class:`ClashWarnings`) and
    ``somatize-tasks workers`` marks the id (:func:`recent_clashes`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import NamedTuple

from somatize_tasks.errors import DuplicateWorkerIdError
from somatize_tasks.workers.registry import Registry

log = logging.getLogger(__name__)

#: Seconds between two warnings about the same clash in one worker's log.
WARN_EVERY_S = 60.0
#: A clash older than this many heartbeat TTLs is no longer shown.
SHOWN_TTLS = 10


class Holder(NamedTuple):
    """Who last beat under a worker id: its instance, when (Redis ms), and Redis' now."""

    instance: str | None
    seen_ms: int | None
    now_ms: int


class Clash(NamedTuple):
    """Two processes seen beating under one worker id, the last time at ``at_ms``."""

    first: str
    second: str
    at_ms: int
    age_s: float


def holder(registry: Registry, worker_id: str) -> Holder:
    """Who holds ``worker_id`` now, in one round trip."""
    pipe = registry.client.pipeline(transaction=False)
    pipe.time()
    pipe.hget(registry.keys.workers_instances, worker_id)
    pipe.zscore(registry.keys.workers_seen, worker_id)
    (seconds, micros), instance, seen = pipe.execute()
    return Holder(
        instance.decode() if instance is not None else None,
        int(seen) if seen is not None else None,
        int(seconds) * 1000 + int(micros) // 1000,
    )


def check_unique(
    registry: Registry,
    worker_id: str,
    instance: str,
    interval_s: float,
    poll_s: float = 0.1,
) -> None:
    """Return when no other live process heartbeats as ``worker_id``; raise
    :class:`DuplicateWorkerIdError` when one does (see the module docstring)."""
    first = holder(registry, worker_id)
    if not _fresh(first, registry.ttl_ms) or first.instance in (None, instance):
        return
    window_s = min(registry.ttl_ms / 1000, 1.5 * interval_s + 0.5)
    until = time.monotonic() + window_s
    while time.monotonic() < until:
        time.sleep(poll_s)
        now = holder(registry, worker_id)
        if not _fresh(now, registry.ttl_ms):
            return  # its heartbeat expired: a predecessor
        if now.instance not in (None, instance) and (now.seen_ms or 0) > (first.seen_ms or 0):
            raise DuplicateWorkerIdError.for_worker(worker_id, str(now.instance))
    log.info(
        "worker id %s: the last heartbeat (from %s) was not renewed; taking the id over",
        worker_id,
        first.instance,
    )


def _fresh(seen: Holder, ttl_ms: int) -> bool:
    return seen.seen_ms is not None and seen.seen_ms >= seen.now_ms - ttl_ms


def recent_clashes(registry: Registry, worker_ids: Iterable[str]) -> dict[str, Clash]:
    """The ids among ``worker_ids`` two live processes beat under lately."""
    ids = sorted(set(worker_ids))
    if not ids:
        return {}
    pipe = registry.client.pipeline(transaction=False)
    pipe.time()
    pipe.hmget(registry.keys.workers_clashes, ids)
    (seconds, micros), raw = pipe.execute()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    found = {}
    for worker_id, value in zip(ids, raw, strict=True):
        parts = value.decode().split(" ") if value else []
        if len(parts) != 3 or not parts[2].isdigit():
            continue
        age_s = max(0.0, (now_ms - int(parts[2])) / 1000)
        if age_s <= SHOWN_TTLS * registry.ttl_ms / 1000:
            found[worker_id] = Clash(parts[0], parts[1], int(parts[2]), age_s)
    return found


class ClashWarnings:
    """What a heartbeat that clashed says in the worker's log: one line a minute."""

    def __init__(self, worker_id: str, instance: str) -> None:
        self.worker_id = worker_id
        self.instance = instance
        self._next = 0.0

    def saw(self, other: str) -> None:
        """A beat replaced ``other``'s fresh one ('' for none: nothing to say)."""
        if not other or time.monotonic() < self._next:
            return
        self._next = time.monotonic() + WARN_EVERY_S
        log.warning(
            "worker id %s is used by two live processes (this one, %s, and %s): both "
            "take its messages, so nodes may run twice; stop one, or give it another "
            "id (--worker-id / SOMATIZE_WORKER_ID)",
            self.worker_id,
            self.instance,
            other,
        )
