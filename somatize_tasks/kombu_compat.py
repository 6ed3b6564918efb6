"""A guard around one kombu behaviour that can crash a worker when Redis restarts.

When the broker connection drops, Celery closes the channel, and kombu's
Redis transport tries to put the worker's unacknowledged messages back on
their queues first. If the connection object is already detached at that
point (seen with kombu 5.7 while Redis restarts), building a client raises
``AttributeError`` and the whole worker process exits instead of
reconnecting. Skipping that restore is safe: the messages stay in kombu's
unacked index, and its periodic sweep restores them once the visibility
timeout passes; somatize's own reaper re-dispatches lost nodes anyway.
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.transport import redis as kombu_redis

log = logging.getLogger(__name__)
_original = kombu_redis.QoS.restore_unacked


def _restore_unacked(self: Any, client: Any = None) -> Any:
    if client is None and getattr(self.channel.connection, "client", None) is None:
        log.warning("broker connection already gone; unacked messages will be restored later")
        return None
    return _original(self, client)


def guard_restore_on_close() -> None:
    """Install the guard (idempotent); workers call it at start-up."""
    if kombu_redis.QoS.restore_unacked is not _restore_unacked:
        kombu_redis.QoS.restore_unacked = _restore_unacked  # type: ignore[method-assign]
