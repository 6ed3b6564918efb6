"""Slots placed but not yet running count against their worker.

A heartbeat counts the node tasks a worker is *running*. Two runs submitted
at once both read "idle" and both land on the same worker, while another
sits idle. So a placement reserves the slots it hands out, and the next
placement adds them to each worker's ``active_jobs`` before scheduling:

- ``<p>:reserved`` HASH ``<worker>|<run>`` -> slots still reserved, and
  ``<p>:reserved:exp`` ZSET of the same fields -> expiry (Redis ms). An
  entry ends when its run's blocks start on that worker (one slot per block
  start, :func:`release_one`, at which point the heartbeat counts it), when
  the next placement or the elected reaper sees its run ended, or
  ``reservation_ttl_s`` after it was made (a run that never started).
- ``<p>:placing`` STRING: a short lock (token, PX) held from reading the
  registry to recording the reservations, so two producers placing at the
  same moment see each other's slots. A producer that cannot get it within
  ``LOCK_WAIT_S`` places without it (less even, never stuck).

How many slots a run reserves on a worker: what its busiest phase puts
there at once (a sequential phase one, a parallel phase one per assignment
on that worker), capped at the worker's ``max_concurrent``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError

from scheduler import DistributionPlan, WorkerInfo
from somatize_tasks.config.keys import RedisKeys
from somatize_tasks.lua import script

LOCK_MS = 5_000
LOCK_WAIT_S = 5.0

_held = threading.local()


def reservation_keys(keys: RedisKeys) -> list[str]:
    """The reserved-slots hash and its expiry set (one pair per key prefix)."""
    return [keys.key("reserved"), keys.key("reserved", "exp")]


def reservation_field(worker_id: str, run_id: str) -> str:
    """The field that counts one run's reserved slots on one worker."""
    return f"{worker_id}|{run_id}"


class Reservations:
    """The reservations under one key prefix."""

    def __init__(self, client: Redis[bytes], keys: RedisKeys, ttl_s: float) -> None:
        self.client = client
        self.keys = keys
        self.ttl_ms = int(ttl_s * 1000)
        self.fields = reservation_keys(keys)
        self._read = script(client, "read_reservations")
        self._reserve = script(client, "reserve_slots")
        self._release_one = script(client, "release_slot")
        self._unlock = script(client, "release_lock")

    def by_worker(self, flat: Any = None) -> dict[str, int]:
        """Slots reserved per worker id (expired entries dropped); from ``flat``, the
        reply to :meth:`queue_read`, if given."""
        if flat is None or isinstance(flat, NoScriptError):  # Redis forgot the script
            flat = self._read(keys=self.fields, args=[self.keys.run("")])
        elif isinstance(flat, Exception):
            raise flat
        counts: Counter[str] = Counter()
        for field, slots in zip(flat[::2], flat[1::2], strict=True):
            counts[field.decode().partition("|")[0]] += max(0, int(slots))
        return dict(counts)

    def queue_read(self, pipe: Any) -> None:
        """Queue :meth:`by_worker`'s read on ``pipe`` (executed ``raise_on_error=False``;
        pass its reply to ``by_worker``), to share a round trip with other reads."""
        sha: str = self._read.sha  # type: ignore[attr-defined]
        pipe.evalsha(sha, len(self.fields), *self.fields, self.keys.run(""))

    def count_in(self, workers: list[WorkerInfo], flat: Any = None) -> list[WorkerInfo]:
        """``workers`` with their reserved slots added to ``active_jobs`` (``flat``: as
        for :meth:`by_worker`).

        Remembered for this thread, so :func:`reserve_run` knows the workers' limits.
        """
        reserved = self.by_worker(flat)
        _held.workers = {w.id: w for w in workers}
        return [
            w.model_copy(update={"active_jobs": w.active_jobs + reserved[w.id]})
            if reserved.get(w.id)
            else w
            for w in workers
        ]

    def reserve(
        self,
        run_id: str,
        distribution: DistributionPlan,
        workers: dict[str, WorkerInfo],
        pipe: Any = None,
    ) -> Callable[[], Any] | None:
        """Record what ``distribution`` will put on each worker at once; with ``pipe``,
        queue it there and return what redoes it should Redis have lost the script."""
        slots = slots_per_worker(distribution, workers)
        if not slots:
            return None
        args: list[str | int] = [self.ttl_ms]
        for worker_id, count in sorted(slots.items()):
            args += [reservation_field(worker_id, run_id), count]
        _held.made = [reservation_field(worker_id, run_id) for worker_id in slots]
        if pipe is None:
            self._reserve(keys=self.fields, args=args)
            return None
        sha: str = self._reserve.sha  # type: ignore[attr-defined]
        pipe.evalsha(sha, len(self.fields), *self.fields, *args)
        return lambda: self._reserve(keys=self.fields, args=args)

    def forget(self, fields: list[str]) -> None:
        """Drop reservations outright (their run never started: submitting it failed)."""
        if fields:
            pipe = self.client.pipeline(transaction=False)
            pipe.hdel(self.fields[0], *fields)
            pipe.zrem(self.fields[1], *fields)
            pipe.execute()

    def release_one(self, worker_id: str, run_id: str) -> None:
        """A block of ``run_id`` started on ``worker_id``: its heartbeat counts it now."""
        self._release_one(keys=self.fields, args=[reservation_field(worker_id, run_id)])

    def prune(self) -> int:
        """Drop the reservations of runs that are no longer running; how many."""
        fields = [f.decode() for f in self.client.hkeys(self.fields[0])]
        if not fields:
            return 0
        pipe = self.client.pipeline(transaction=False)
        for field in fields:
            pipe.hget(self.keys.run(field.partition("|")[2]), "status")
        ended = [
            f
            for f, status in zip(fields, pipe.execute(), strict=True)
            if status is not None and status != b"running"
        ]
        if ended:
            pipe = self.client.pipeline(transaction=False)
            pipe.hdel(self.fields[0], *ended)
            pipe.zrem(self.fields[1], *ended)
            pipe.execute()
        return len(ended)

    @contextmanager
    def placing(self) -> Iterator[None]:
        """Hold the placement lock (see the module docstring) for this thread."""
        token = uuid.uuid4().hex
        lock = self.keys.key("placing")
        deadline = time.monotonic() + LOCK_WAIT_S
        try:
            while not self.client.set(lock, token, nx=True, px=LOCK_MS):
                if time.monotonic() > deadline:
                    token = ""
                    break
                time.sleep(0.005)
        except RedisConnectionError:
            token = ""  # the caller's next Redis call reports it, naming the server
        _held.lock, _held.made = (self, lock, token), []
        try:
            yield
        except BaseException:
            # The run was reserved but never recorded (its input could not be stored,
            # say): give its slots back now rather than after the TTL.
            self.forget(getattr(_held, "made", []))
            raise
        finally:
            _held.made = []
            unlock()


def reserve_run(
    run_id: str,
    distribution: DistributionPlan,
    client: Redis[bytes],
    also: Callable[[Any], None] = lambda pipe: None,
) -> list[Any]:
    """Inside :meth:`Reservations.placing`: reserve the run's slots, then let the next
    placement go (before the run's input is uploaded and its blocks published).

    One round trip: the commands ``also`` queues on the pipeline go first, and
    their replies are returned (an error reply raises).
    """
    pipe = client.pipeline(transaction=False)
    also(pipe)
    ours = len(pipe)
    redo: list[Callable[[], Any]] = []
    held = getattr(_held, "lock", None)
    if held is not None:
        again = held[0].reserve(run_id, distribution, getattr(_held, "workers", {}), pipe)
        redo += [again] if again is not None else []
        redo += [again for again in [unlock(pipe)] if again is not None]
    replies = pipe.execute(raise_on_error=False)
    for reply, again in zip(replies[ours:], redo, strict=True):
        if isinstance(reply, NoScriptError):  # Redis lost its scripts (a restart)
            again()
        elif isinstance(reply, Exception):
            raise reply
    for reply in replies[:ours]:
        if isinstance(reply, Exception):
            raise reply
    return replies[:ours]


def unlock(pipe: Any = None) -> Callable[[], Any] | None:
    """Release this thread's placement lock, if it holds one (idempotent); with ``pipe``,
    queue the release there and return what redoes it if Redis lost the script."""
    held = getattr(_held, "lock", None)
    _held.lock = None
    if held is None or not held[2]:
        return None
    reservations, lock, token = held
    if pipe is None:
        reservations._unlock(keys=[lock], args=[token])
        return None
    pipe.evalsha(reservations._unlock.sha, 1, lock, token)
    return lambda: reservations._unlock(keys=[lock], args=[token])


def slots_per_worker(
    distribution: DistributionPlan, workers: dict[str, WorkerInfo]
) -> dict[str, int]:
    """The most slots any one phase of ``distribution`` takes on each worker."""
    phase_of = {a.node_id: a for a in distribution.assignments}
    most: Counter[str] = Counter()
    for phase in distribution.phases:
        here: Counter[str] = Counter()
        for node_id in phase.node_ids:
            assignment = phase_of.get(node_id)
            if assignment is not None:
                here[assignment.worker_id] += 1
        for worker_id, count in here.items():
            taken = count if phase.phase_type.kind == "parallel" else 1
            most[worker_id] = max(most[worker_id], taken)
    if not distribution.phases:  # no phases recorded: one slot per worker used
        most = Counter({a.worker_id: 1 for a in distribution.assignments})
    return {
        worker_id: min(count, workers[worker_id].max_concurrent) if worker_id in workers else count
        for worker_id, count in most.items()
    }
