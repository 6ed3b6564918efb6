"""Guards around two kombu behaviours that crash a worker when Redis restarts.

Both come from the same state: the broker connection dropped, Celery closed
the channel (kombu sets its ``connection`` to None) and opened a new one, but
something still uses the old channel. Building a Redis client from it then
raises ``AttributeError: 'NoneType' object has no attribute 'client'``,
which nothing catches, and the worker process exits for good instead of
reconnecting (seen with kombu 5.7).

- On close, kombu first puts the worker's unacknowledged messages back on
  their queues (``QoS.restore_unacked``).
- A task that was running across the restart is acknowledged (or rejected)
  when it ends, on the channel it was received on (``QoS.ack``/``reject``).

Skipping either is safe: the message stays in kombu's unacked index (in
Redis, if Redis kept its data) and kombu's periodic sweep restores it once
the visibility timeout passes; a redelivered copy of a finished node is
dropped by ``mark_running`` (the node is done), and somatize's reaper
re-dispatches lost nodes anyway.
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.transport import redis as kombu_redis

log = logging.getLogger(__name__)
_original_restore = kombu_redis.QoS.restore_unacked
_original_ack = kombu_redis.QoS.ack
_original_reject = kombu_redis.QoS.reject


def _closed(qos: Any) -> bool:
    return getattr(qos.channel, "connection", None) is None


def _restore_unacked(self: Any, client: Any = None) -> Any:
    if client is None and getattr(self.channel.connection, "client", None) is None:
        log.warning("broker connection already gone; unacked messages will be restored later")
        return None
    return _original_restore(self, client)


def _ack(self: Any, delivery_tag: Any) -> None:
    if _closed(self):
        log.warning(
            "message %s was received before the broker connection dropped; it cannot be "
            "acknowledged now and will be redelivered after the visibility timeout "
            "(a finished node's copy is then dropped)", delivery_tag,
        )  # fmt: skip
        return
    _original_ack(self, delivery_tag)


def _reject(self: Any, delivery_tag: Any, requeue: bool = False) -> None:
    if _closed(self):
        _ack(self, delivery_tag)
        return
    _original_reject(self, delivery_tag, requeue)


def guard_restore_on_close() -> None:
    """Install the guards (idempotent); workers call it at start-up."""
    if kombu_redis.QoS.restore_unacked is not _restore_unacked:
        kombu_redis.QoS.restore_unacked = _restore_unacked  # type: ignore[method-assign]
        kombu_redis.QoS.ack = _ack  # type: ignore[method-assign]
        kombu_redis.QoS.reject = _reject  # type: ignore[method-assign]
