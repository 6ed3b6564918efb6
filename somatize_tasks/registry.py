"""The live worker registry: heartbeats in, fresh ``WorkerInfo`` lists out.

Both directions are single Lua scripts, so writing a heartbeat and reading
every live worker each cost one Redis round trip however many workers
there are. Freshness is judged by Redis' own clock (``TIME`` inside the
scripts), so machines with skewed clocks still agree on who is alive.

Script keys (see :mod:`somatize_tasks.keys`):
    KEYS[1] ``<p>:workers:seen``  ZSET worker id -> last heartbeat (ms)
    KEYS[2] ``<p>:workers:info``  HASH worker id -> WorkerInfo JSON
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import BaseModel, ValidationError
from redis import Redis

from scheduler import WorkerInfo
from somatize_tasks.connections import redis_client
from somatize_tasks.keys import WORKER_RETENTION_MS, RedisKeys
from somatize_tasks.settings import Settings

log = logging.getLogger(__name__)

# ARGV: worker id, WorkerInfo JSON, retention ms. Returns Redis time in ms.
_HEARTBEAT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]))
for i = 1, #old do redis.call('HDEL', KEYS[2], old[i]) end
if #old > 0 then redis.call('ZREM', KEYS[1], unpack(old)) end
return now
"""

# ARGV: ttl ms, mode ('live' or 'dead'). Returns one JSON text,
# {"now": ms, "workers": [{"seen": ms, "info": <WorkerInfo JSON>}, ...]}, assembled
# from the stored JSON without re-encoding, so the client parses it in one call.
_READ = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cutoff = now - tonumber(ARGV[1])
local seen
if ARGV[2] == 'live' then
  seen = redis.call('ZRANGEBYSCORE', KEYS[1], cutoff, '+inf', 'WITHSCORES')
else
  seen = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. cutoff, 'WITHSCORES')
end
local parts = {}
local batch = 500
for start = 1, #seen, 2 * batch do
  local ids = {}
  for i = start, math.min(start + 2 * batch - 1, #seen), 2 do ids[#ids + 1] = seen[i] end
  local infos = redis.call('HMGET', KEYS[2], unpack(ids))
  for j = 1, #ids do
    if infos[j] then
      local score = seen[start + 2 * (j - 1) + 1]
      parts[#parts + 1] = '{"seen":' .. score .. ',"info":' .. infos[j] .. '}'
    end
  end
end
return '{"now":' .. now .. ',"workers":[' .. table.concat(parts, ',') .. ']}'
"""

_DEREGISTER = """
redis.call('ZREM', KEYS[1], ARGV[1])
return redis.call('HDEL', KEYS[2], ARGV[1])
"""


@dataclass(frozen=True)
class SeenWorker:
    """A worker as the registry last heard from it (times by Redis' clock)."""

    info: WorkerInfo
    seen_ms: int
    age_s: float

    @property
    def last_seen(self) -> datetime:
        return datetime.fromtimestamp(self.seen_ms / 1000, tz=UTC)


class _Entry(BaseModel):
    seen: float
    info: WorkerInfo


class _Reply(BaseModel):
    now: int
    workers: list[_Entry]


class Registry:
    """Reads and writes heartbeats under one key prefix."""

    def __init__(self, client: Redis[bytes], keys: RedisKeys, ttl_s: float) -> None:
        self.client = client
        self.keys = keys
        self.ttl_ms = int(ttl_s * 1000)
        self._heartbeat = client.register_script(_HEARTBEAT)
        self._read = client.register_script(_READ)
        self._deregister = client.register_script(_DEREGISTER)

    @classmethod
    def from_settings(cls, settings: Settings, client: Redis[bytes] | None = None) -> Registry:
        return cls(client or redis_client(settings), RedisKeys(settings.key_prefix),
                   settings.heartbeat_ttl_s)

    @property
    def _script_keys(self) -> list[str]:
        return [self.keys.workers_seen, self.keys.workers_info]

    def heartbeat(self, info: WorkerInfo) -> int:
        """Record ``info`` as fresh now; returns the Redis time written (ms)."""
        return int(self._heartbeat(
            keys=self._script_keys, args=[info.id, info.model_dump_json(), WORKER_RETENTION_MS]
        ))

    def deregister(self, worker_id: str) -> bool:
        """Remove a worker at once (clean shutdown); True if it was registered."""
        return bool(self._deregister(keys=self._script_keys, args=[worker_id]))

    def live(self) -> list[SeenWorker]:
        """Workers whose last heartbeat is within the TTL, sorted by id (stable placement)."""
        return self._fetch("live")

    def dead(self) -> list[SeenWorker]:
        """Workers that stopped heartbeating without deregistering (within retention)."""
        return self._fetch("dead")

    def _fetch(self, mode: str) -> list[SeenWorker]:
        raw = self._read(keys=self._script_keys, args=[self.ttl_ms, mode])
        try:
            reply = _Reply.model_validate_json(raw)
        except ValidationError:
            return self._fetch_leniently(raw)
        found = [SeenWorker(entry.info, int(entry.seen), max(0.0, (reply.now - entry.seen) / 1000))
                 for entry in reply.workers]
        found.sort(key=lambda worker: worker.info.id)
        return found

    def _fetch_leniently(self, raw: bytes) -> list[SeenWorker]:
        """One unreadable entry (a worker of another version) must not hide the rest."""
        document = json.loads(raw)
        found: list[SeenWorker] = []
        for entry in document["workers"]:
            try:
                info = WorkerInfo.model_validate(entry["info"])
            except ValidationError as exc:
                log.warning("ignoring unreadable heartbeat %r: %s", entry["info"], exc)
                continue
            seen = int(entry["seen"])
            found.append(SeenWorker(info, seen, max(0.0, (document["now"] - seen) / 1000)))
        found.sort(key=lambda worker: worker.info.id)
        return found


def live_workers(source: Settings | Registry | None = None) -> list[WorkerInfo]:
    """The live workers' WorkerInfo, in one Redis round trip.

    ``source`` is the settings (a client is built for the call), a
    :class:`Registry` to reuse its connection, or ``None`` for
    ``Settings.from_env()``.
    """
    if not isinstance(source, Registry):
        source = Registry.from_settings(source or Settings.from_env())
    return [worker.info for worker in source.live()]
