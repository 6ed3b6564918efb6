"""One Redis client per kombu channel for publishing, instead of one per message.

kombu's Redis transport builds a new ``redis.Redis`` for every publish
(``Channel.conn_or_acquire``), and a task message is two publishes (the
message and its ``task-sent`` event). A ``redis.Redis`` is a thin wrapper over
the channel's connection pool, but building one fills its table of reply
callbacks, about 170 entries: ~60 us each on an idle machine, 2-3 times that
while the workers and the producer share two cores, on every node dispatched.

:func:`reuse_publish_clients` makes ``conn_or_acquire`` hand out one client
per channel, built over the channel's current pool and rebuilt when kombu
replaces that pool (after a disconnect). A client holds no connection of its
own (each command takes one from the pool), so sharing it changes nothing
else; a caller that passes its own client still gets that one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu.transport import redis as kombu_redis

_original_conn_or_acquire = kombu_redis.Channel.conn_or_acquire
_CACHED = "_somatize_publish_client"


@contextmanager
def _conn_or_acquire(self: Any, client: Any = None) -> Iterator[Any]:
    if client:
        yield client
        return
    pool = self.pool
    cached = getattr(self, _CACHED, None)
    if cached is None or cached[0] is not pool:
        cached = (pool, self._create_client())
        setattr(self, _CACHED, cached)
    yield cached[1]


def reuse_publish_clients() -> None:
    """Install the reuse (idempotent); every somatize app does at creation."""
    if kombu_redis.Channel.conn_or_acquire is _original_conn_or_acquire:
        kombu_redis.Channel.conn_or_acquire = _conn_or_acquire  # type: ignore[method-assign]
