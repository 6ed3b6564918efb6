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
from typing import TYPE_CHECKING, Any

from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError

from scheduler import DistributionPlan, WorkerInfo
from somatize_tasks.keys import RedisKeys

if TYPE_CHECKING:
    from somatize_tasks.runtime.context import RunContext

LOCK_MS = 5_000
LOCK_WAIT_S = 5.0

# KEYS: counts, expiries. ARGV: run key prefix ("<p>:run:"). Drops expired entries
# and those of runs that ended (a run that ended releases its slots). A run not in
# Redis yet keeps them: it is reserved before its state is written. Returns the rest
# as a flat list.
_READ = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
local flat = redis.call('HGETALL', KEYS[1])
local kept = {}
for i = 1, #flat, 2 do
  local run = string.match(flat[i], '|(.*)$')
  local status = redis.call('HGET', ARGV[1] .. run, 'status')
  if status and status ~= 'running' then
    old[#old + 1] = flat[i]
  else
    kept[#kept + 1] = flat[i]; kept[#kept + 1] = flat[i + 1]
  end
end
if #old > 0 then
  redis.call('HDEL', KEYS[1], unpack(old))
  redis.call('ZREM', KEYS[2], unpack(old))
end
return kept
"""

# KEYS: counts, expiries. ARGV: ttl ms, then field, slots pairs.
_RESERVE = """
local t = redis.call('TIME')
local expiry = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
for i = 2, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
  redis.call('ZADD', KEYS[2], expiry, ARGV[i])
end
return 1
"""

# KEYS: counts, expiries. ARGV: field.
_RELEASE_ONE = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then
  redis.call('HDEL', KEYS[1], ARGV[1]); redis.call('ZREM', KEYS[2], ARGV[1])
end
return 1
"""

_UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

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
        self._read = client.register_script(_READ)
        self._reserve = client.register_script(_RESERVE)
        self._release_one = client.register_script(_RELEASE_ONE)
        self._unlock = client.register_script(_UNLOCK)

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
            if reserved.get(w.id) else w
            for w in workers
        ]

    def reserve(self, run_id: str, distribution: DistributionPlan,
                workers: dict[str, WorkerInfo], pipe: Any = None) -> Callable[[], Any] | None:
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
        ended = [f for f, status in zip(fields, pipe.execute(), strict=True)
                 if status is not None and status != b"running"]
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
    run_id: str, distribution: DistributionPlan, client: Redis[bytes],
    also: Callable[[Any], None] = lambda pipe: None,
) -> list[Any]:  # fmt: skip
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


def slots_per_worker(distribution: DistributionPlan,
                     workers: dict[str, WorkerInfo]) -> dict[str, int]:
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


_by_context: dict[int, Reservations] = {}


def reservations_of(context: RunContext) -> Reservations:
    """The :class:`Reservations` of a run context (one per context, reused)."""
    found = _by_context.get(id(context))
    if found is None:
        found = _by_context[id(context)] = Reservations(
            context.redis, context.keys, context.settings.reservation_ttl_s
        )
    return found
