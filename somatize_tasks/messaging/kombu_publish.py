"""Cheaper publishing on kombu's Redis transport: one client per channel, and
messages that ride in a transaction of the caller's.

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

:func:`publishing_into` queues a producer's publishes on a Redis pipeline of
the caller's, through kombu's own publish batches (5.7): the dispatcher records
a block and publishes its message in one transaction, one round trip where the
record, the message, its ``task-sent`` event and the outbox's "sent" took four.
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


class _IntoPipeline:
    """A kombu publish batch whose Redis commands join a pipeline of the caller's."""

    def __init__(self, channel: Any, pipe: Any) -> None:
        self.channel = channel
        self.pipe = pipe

    def publish(self, message: Any, **kwargs: Any) -> Any:
        return self.channel.basic_publish(message, _publish_batch=self, **kwargs)

    def add(self, name: str, *args: Any) -> None:
        getattr(self.pipe, name)(*args)

    def flush(self) -> None:
        """The caller executes the pipeline."""

    def discard(self) -> None:
        """Nothing was sent: the caller does not execute the pipeline."""

    def close(self) -> None:
        """Nothing of its own to release."""


def can_publish_into(producer: Any) -> bool:
    """Whether :func:`publishing_into` works for ``producer``: kombu 5.7's publish
    batches, on a Redis channel that allows them."""
    channel = producer.channel
    return (
        hasattr(producer, "batch")
        and hasattr(channel, "create_publish_batch")
        and bool(getattr(channel, "supports_batch_publish", False))
    )


@contextmanager
def publishing_into(producer: Any, pipe: Any) -> Iterator[None]:
    """What ``producer`` publishes inside is queued on ``pipe`` (its LPUSH, its events'
    PUBLISH) instead of sent, so it goes out when the caller executes ``pipe``:
    in the same transaction as the records that must precede it. Only for a
    broker that is the Redis ``pipe`` talks to, and a producer
    :func:`can_publish_into` accepts."""
    with producer.batch() as batch:
        batch.state.session = _IntoPipeline(producer.channel, pipe)
        yield
