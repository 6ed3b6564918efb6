"""The live worker registry: heartbeats in, fresh ``WorkerInfo`` lists out.

Writing a heartbeat is one Lua script and reading every live worker one
pipelined ``TIME`` + ``HVALS``, so each costs one Redis round trip however
many workers there are. Freshness is judged by Redis' own clock (``TIME``,
in the script and in the read), so machines with skewed clocks still agree
on who is alive.

Why this encoding: a full read must stay cheap at 10,000 workers (under
20 ms). Each entry is stored as one record, ``"<compact WorkerInfo>
<seen ms, 13 digits>"`` (the compact form is a JSON array of the fields in
order, about half the size of the object form), so a read is one native
``HVALS`` (about 3 ms of Redis time at 10,000 workers; a Lua script that
copies the values costs three times that) parsed by hiredis; freshness is
a byte comparison of the fixed-width suffix, order by id a plain sort of
the records (they start with the id); and the client keeps the
``WorkerInfo`` parsed from each distinct record body: between two reads
most workers only changed their ``seen`` suffix, so most entries cost a
dict lookup, not a validation. A worker's record is also written into one
hash per tag it carries, so a tag-filtered read touches only the workers
with that tag, however many others there are.

Script keys (see :mod:`somatize_tasks.config.keys`):
    ``<p>:workers:seen``        ZSET worker id -> last heartbeat (ms); pruning and
                                the reaper's "whose heartbeat just expired"
    ``<p>:workers:info``        HASH worker id -> ``"<compact WorkerInfo> <seen ms>"``
    ``<p>:workers:tags``        SET  every tag a worker has advertised
    ``<p>:workers:tag:<tag>``   HASH worker id -> the same record, per tag
    ``<p>:workers:tasks``       HASH worker id -> JSON list of the node task ids it
                                holds (absent: no report; see ``runtime.orphans``)
    ``<p>:workers:keys``        HASH worker id -> JSON list of the message key ids it
                                accepts, written once at its start (see ``signing``)
    ``<p>:workers:peers``       HASH worker id -> where it serves values (``workers.peers``)
Entries older than :data:`~somatize_tasks.config.keys.WORKER_RETENTION_MS` are
pruned from all of them by the next heartbeat (so every key has an end).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from itertools import chain
from operator import itemgetter
from typing import Any, NamedTuple

from pydantic import ValidationError
from redis import Redis

from scheduler import WorkerInfo
from somatize_tasks.config.connections import redis_client
from somatize_tasks.config.keys import WORKER_RETENTION_MS, RedisKeys
from somatize_tasks.config.settings import Settings
from somatize_tasks.lua import script

log = logging.getLogger(__name__)
_BODY = itemgetter(slice(None, -14))


class SeenWorker(NamedTuple):
    """A worker as the registry last heard from it (times by Redis' clock).

    A named tuple, not a dataclass: a read of 10,000 workers builds 10,000
    of them, and a tuple is several times cheaper to make.
    """

    info: WorkerInfo
    seen_ms: int
    age_s: float

    @property
    def last_seen(self) -> datetime:
        return datetime.fromtimestamp(self.seen_ms / 1000, tz=UTC)


class Beat(NamedTuple):
    """What one heartbeat wrote: Redis' time (ms), and the other process (an instance
    id) whose fresh heartbeat under the same worker id it replaced ('' for none)."""

    now_ms: int
    clash: str


class Registry:
    """Reads and writes heartbeats under one key prefix."""

    def __init__(self, client: Redis[bytes], keys: RedisKeys, ttl_s: float) -> None:
        self.client = client
        self.keys = keys
        self.ttl_ms = int(ttl_s * 1000)
        self._heartbeat = script(client, "heartbeat")
        self._deregister = script(client, "deregister")
        # JSON text -> parsed WorkerInfo (frozen, so safe to share between reads).
        self._parsed: dict[bytes, WorkerInfo] = {}

    @classmethod
    def from_settings(cls, settings: Settings, client: Redis[bytes] | None = None) -> Registry:
        return cls(
            client or redis_client(settings),
            RedisKeys(settings.key_prefix),
            settings.heartbeat_ttl_s,
        )

    @property
    def _script_keys(self) -> list[str]:
        return [
            self.keys.workers_seen,
            self.keys.workers_info,
            self.keys.worker_tags,
            self.keys.workers_tasks,
            self.keys.workers_keys,
            self.keys.workers_instances,
            self.keys.workers_clashes,
            self.keys.workers_peers,
        ]

    def heartbeat(self, info: WorkerInfo, tasks: Sequence[str] | None = None) -> int:
        """Record ``info`` as fresh now, with the node task ids the worker holds
        (None: no report); returns the Redis time written (ms)."""
        return self.beat(info, tasks).now_ms

    def beat(
        self, info: WorkerInfo, tasks: Sequence[str] | None = None, instance: str = ""
    ) -> Beat:
        """:meth:`heartbeat`, written by process ``instance`` (``workers.identity``):
        the reply also names another live process beating under the same id."""
        held = "" if tasks is None else json.dumps(list(tasks), separators=(",", ":"))
        args = [
            info.id,
            encode_info(info),
            WORKER_RETENTION_MS,
            self.keys.worker_tag(""),
            held,
            instance,
            self.ttl_ms,
            *info.tags,
        ]
        now, clash = self._heartbeat(keys=self._script_keys, args=args)
        return Beat(int(now), clash.decode() if isinstance(clash, bytes) else str(clash))

    def held_tasks(self, worker_ids: Iterable[str]) -> dict[str, frozenset[str] | None]:
        """The node task ids each worker last reported holding (None: no report)."""
        found = self._json_fields(self.keys.workers_tasks, worker_ids)
        return {w: None if v is None else frozenset(v) for w, v in found.items()}

    def announce_keys(self, worker_id: str, key_ids: Sequence[str]) -> None:
        """Say which message keys ``worker_id`` accepts (ids, never keys); forgotten
        with the worker's other records."""
        self.client.hset(self.keys.workers_keys, worker_id, json.dumps(list(key_ids)))

    def accepted_keys(self, worker_ids: Iterable[str]) -> dict[str, list[str] | None]:
        """The key ids each worker announced (None: it announced nothing)."""
        return self._json_fields(self.keys.workers_keys, worker_ids)

    def _json_fields(self, key: str, worker_ids: Iterable[str]) -> dict[str, list[str] | None]:
        """Each worker's JSON list in the hash ``key``, in one HMGET (None: absent)."""
        ids = sorted(set(worker_ids))
        return json_fields(ids, self.client.hmget(key, ids)) if ids else {}

    def deregister(self, worker_id: str) -> bool:
        """Remove a worker at once (clean shutdown); True if it was registered."""
        args = [worker_id, self.keys.worker_tag("")]
        return bool(self._deregister(keys=self._script_keys, args=args))

    def live(self, tags: Iterable[str] | None = None) -> list[SeenWorker]:
        """Workers whose last heartbeat is within the TTL, sorted by id (stable placement).

        With ``tags``, only workers carrying at least one of them; the read
        then costs what those workers cost, whatever else is registered.
        """
        now, infos, records = self._fetch(True, tags)
        return [_seen(i, r, now) for i, r in zip(infos, records, strict=True)]

    def live_infos(self, tags: Iterable[str] | None = None) -> list[WorkerInfo]:
        """:meth:`live` without the timestamps: the cheapest full read."""
        return self._fetch(True, tags)[1]

    def dead(self) -> list[SeenWorker]:
        """Workers that stopped heartbeating without deregistering (within retention)."""
        now, infos, records = self._fetch(False, None)
        return [_seen(i, r, now) for i, r in zip(infos, records, strict=True)]

    def _fetch(
        self, live: bool, tags: Iterable[str] | None
    ) -> tuple[int, list[WorkerInfo], list[bytes]]:
        """``(Redis now ms, infos, their records)`` of the live (or dead) entries, by id.

        Written as comprehensions over the one reply: at 10,000 entries the
        Python side is most of a read's cost.
        """
        pipe = self.client.pipeline(transaction=False)
        queued = self.queue_read(pipe, tags)
        if not queued:
            return 0, [], []
        return self.parse_read(pipe.execute(), live, tags)

    def queue_read(self, pipe: Any, tags: Iterable[str] | None = None) -> int:
        """Queue a read of the entries on ``pipe`` (for :meth:`parse_read`, which takes
        the replies from the first on), so a caller can send its own commands in the
        same round trip; how many commands it queued (0: nothing to read)."""
        hashes = self._hashes(tags)
        if hashes:
            pipe.time()
            for name in hashes:
                pipe.hvals(name)
        return len(hashes) + 1 if hashes else 0

    def _hashes(self, tags: Iterable[str] | None) -> list[str]:
        return (
            [self.keys.workers_info]
            if tags is None
            else sorted({self.keys.worker_tag(tag) for tag in tags})
        )

    def parse_read(
        self, replies: list[Any], live: bool = True, tags: Iterable[str] | None = None
    ) -> tuple[int, list[WorkerInfo], list[bytes]]:
        """What :meth:`_fetch` returns, from the replies to :meth:`queue_read`."""
        hashes = self._hashes(tags)
        (seconds, micros), *values = replies[: len(hashes) + 1]
        now = int(seconds) * 1000 + int(micros) // 1000
        cutoff = b"%013d" % (now - self.ttl_ms)
        records: list[bytes] = values[0] if len(values) == 1 else list(chain(*values))
        if live:
            kept = [r for r in records if r[-13:] >= cutoff and r[-14:-13] == b" "]
        else:
            kept = [r for r in records if r[-13:] < cutoff and r[-14:-13] == b" "]
        kept.sort()  # a record starts with its JSON-quoted id: sorted by id
        bodies = list(map(_BODY, kept))
        previous = self._parsed
        infos: list[WorkerInfo | None] = list(map(previous.get, bodies))
        if not all(infos):  # (not ``None in``: that compares models with ==)
            infos = [info or decode_info(body) for info, body in zip(infos, bodies, strict=True)]
        if not all(infos) or len(hashes) > 1:
            # unreadable entries out; a worker with several of the tags is in several hashes
            unique = {i.id: (i, r, b) for i, r, b in zip(infos, kept, bodies, strict=True) if i}
            ordered = [unique[worker_id] for worker_id in sorted(unique)]
            infos = [entry[0] for entry in ordered]
            kept = [entry[1] for entry in ordered]
            bodies = [entry[2] for entry in ordered]
        parsed = dict(zip(bodies, infos, strict=True))
        self._parsed = parsed if tags is None else {**previous, **parsed}
        if len(self._parsed) > 4 * max(len(infos), 1024):
            self._parsed = parsed
        return now, infos, kept  # type: ignore[return-value]


def json_fields(ids: list[str], raw: list[bytes | None]) -> dict[str, list[str] | None]:
    """An ``HMGET`` of ``ids`` whose values are JSON lists, by id (None: absent)."""
    return {w: None if r is None else list(json.loads(r)) for w, r in zip(ids, raw, strict=True)}


def encode_info(info: WorkerInfo) -> str:
    """The compact record body: the WorkerInfo fields as a JSON array, in order."""
    return json.dumps(
        [
            info.id,
            info.name,
            info.tags,
            info.gpu,
            info.cpu_cores,
            info.active_jobs,
            info.max_concurrent,
        ],
        separators=(",", ":"),
    )


def decode_info(body: bytes) -> WorkerInfo | None:
    """A record body back; None (with a warning) for one this version cannot read.

    One unreadable entry (a worker of another version) must not hide the rest.
    """
    try:
        fields = json.loads(body)
        return WorkerInfo(
            id=fields[0],
            name=fields[1],
            tags=fields[2],
            gpu=fields[3],
            cpu_cores=fields[4],
            active_jobs=fields[5],
            max_concurrent=fields[6],
        )
    except (ValueError, TypeError, IndexError, KeyError, ValidationError) as exc:
        log.warning("ignoring unreadable heartbeat %r: %s", body[:200], exc)
        return None


def _seen(info: WorkerInfo, record: bytes, now_ms: int) -> SeenWorker:
    seen = int(record[-13:])
    return SeenWorker(info, seen, max(0.0, (now_ms - seen) / 1000))


def live_workers(source: Settings | Registry | None = None) -> list[WorkerInfo]:
    """The live workers' WorkerInfo, in one Redis round trip.

    ``source`` is the settings (a client is built for the call), a
    :class:`Registry` to reuse its connection, or ``None`` for
    ``Settings.from_env()``.
    """
    if not isinstance(source, Registry):
        source = Registry.from_settings(source or Settings.from_env())
    return source.live_infos()
