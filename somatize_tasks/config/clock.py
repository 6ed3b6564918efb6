"""One clock for the cluster: Redis' ``TIME``, carried forward on this machine.

Deadlines, time limits, grace periods and "started at" stamps are written by one
process and judged by another, often on another machine. Judged with each
machine's own wall clock, a host whose clock is an hour behind made a 3 s node
look as if it had run past a 600 s limit, and a reaper two hours ahead failed
healthy runs for their deadline. So every such stamp and every such "now" is
Redis' ``TIME`` (as heartbeats, leases and message ids already are, inside
their scripts).

Reading ``TIME`` for every stamp would cost a round trip each; a
:class:`RedisClock` reads it once, notes where this machine's monotonic clock
stood (half way through the round trip), and counts on from there: a
duration measured on one machine is right whatever its wall clock says. It
reads ``TIME`` again every :data:`REFRESH_S`, so drift stays far below a
heartbeat. A refresh that cannot reach Redis keeps the last reading (and tries
again a refresh later); only a process that never reached Redis has no clock.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from redis import Redis
from redis.exceptions import RedisError

from somatize_tasks.config.connections import redis_client
from somatize_tasks.config.settings import Settings

#: Seconds between two readings of Redis' ``TIME`` by one process.
REFRESH_S = 60.0


class RedisClock:
    """Redis' ``TIME`` as seen from this process: seconds since the epoch, a float."""

    def __init__(self, client: Redis[Any], refresh_s: float = REFRESH_S) -> None:
        # The pool, weakly: the clock outlives no client (see ``redis_clock``).
        self._pool = weakref.ref(client.connection_pool)
        self.refresh_s = refresh_s
        self._offset: float | None = None  # Redis time minus this machine's monotonic
        self._read_at = 0.0  # monotonic, when ``TIME`` was last asked for

    def now(self) -> float:
        """Redis' time now; reads ``TIME`` first when the last reading is old (or
        there is none: a Redis error then reaches the caller)."""
        mono = time.monotonic()
        if self._offset is None or mono - self._read_at >= self.refresh_s:
            self._read()
        assert self._offset is not None
        return time.monotonic() + self._offset

    def _read(self) -> None:
        before = time.monotonic()
        self._read_at = before  # a failed refresh is tried again a refresh later
        pool = self._pool()
        try:
            if pool is None:
                raise RedisError("the clock's Redis client is gone")
            seconds, micros = Redis(connection_pool=pool).time()
        except RedisError:
            if self._offset is None:
                raise
            return
        after = time.monotonic()
        self._offset = seconds + micros / 1e6 - (before + after) / 2


#: One clock per connection pool: clients built from the same pool share it.
_CLOCKS: weakref.WeakKeyDictionary[Any, RedisClock] = weakref.WeakKeyDictionary()


def redis_clock(client: Redis[Any]) -> RedisClock:
    """The clock of the Redis ``client`` talks to (made on first use, then kept)."""
    pool = client.connection_pool
    clock = _CLOCKS.get(pool)
    if clock is None:
        clock = _CLOCKS[pool] = RedisClock(client)
    return clock


def redis_now(client: Redis[Any]) -> float:
    """Redis' time now, for a stamp or a comparison another machine may make too."""
    return redis_clock(client).now()


#: Clients for :func:`settings_now`, by Redis URL (a process talks to few).
_CLIENTS: dict[str, Redis[bytes]] = {}


def settings_now(settings: Settings) -> float:
    """Redis' time for a process that holds no client of its own at hand: a message's
    expiry is judged on Redis' clock, so it is stamped with it. When Redis cannot be
    reached and was never read, this machine's clock is the best there is."""
    client = _CLIENTS.get(settings.redis_url)
    if client is None:
        client = _CLIENTS[settings.redis_url] = redis_client(settings)
    try:
        return redis_now(client)
    except RedisError:
        return time.time()
