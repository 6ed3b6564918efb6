"""Guards around kombu behaviours that crash a worker: a Redis restart, a malformed envelope.

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

Skipping an ack is safe: the message stays in kombu's unacked index (in
Redis, if Redis kept its data) and kombu's periodic sweep restores it once
the visibility timeout passes; a redelivered copy of a finished node is
dropped by ``mark_running`` (the node is done).

Skipping the restore is not, by itself: Celery forgets the messages it had
received but not started when the connection drops (it expects the broker
to hand them out again), and with Redis that happens only after the
visibility timeout, an hour. A transfer's last step lost that way left its
block waiting for ``transfer_stall_s``. So the tags are kept, and
:class:`RestoreAfterReconnect` (a consumer bootstep, run each time the
consumer connects) puts those messages back on their queues, except the
ones a pool process is still running.

A third guard is for what someone pushed onto a queue by hand: kombu parses
each item it pops (``BRPOP``) as a JSON envelope and builds a message from
it, outside any handler, so an item that is not JSON (``{not json``), not an
object (``[1]``) or lacks ``properties`` stops the worker too. The item is
already popped, so dropping it loses nothing else: :func:`_parse_popped`
and :func:`_deliver` log one line and drop it (kombu's poller treats
``Empty`` as "nothing this time"). Well-formed envelopes with a bad body are
refused later, by :mod:`somatize_tasks.messaging.message_guard`.

A fourth is about clocks: kombu stamps each unacknowledged message with the
receiving worker's wall clock and every worker puts back on its queue those
older than the visibility timeout by its own. A worker whose clock is an hour
behind then had every message it ran handed out again by the others (and one an
hour ahead, theirs). :func:`unacked_on_redis_clock` makes both Redis' time
(:mod:`somatize_tasks.config.clock`) when the broker is the run-state Redis.
"""

from __future__ import annotations

import base64
import binascii
import logging
from functools import partial
from queue import Empty
from typing import Any

from celery import bootsteps
from celery.worker.state import active_requests
from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from somatize_tasks.config.clock import settings_now
from somatize_tasks.config.settings import Settings

log = logging.getLogger(__name__)
_original_restore = kombu_redis.QoS.restore_unacked
_original_ack = kombu_redis.QoS.ack
_original_reject = kombu_redis.QoS.reject
_original_loads = getattr(kombu_redis, "loads")  # noqa: B009  # not in its stubs
_original_deliver = kombu_redis.Transport._deliver
#: How much of a malformed item a log line quotes.
SHOWN_CHARS = 120
#: At most this many delivery tags wait for a connection to come back (bounded).
DEFERRED_MAX = 10_000
_deferred: set[str] = set()
#: What a restore meets when Redis is away.
BROKER_LOST = (RedisConnectionError, RedisTimeoutError, OSError)


def _closed(qos: Any) -> bool:
    return getattr(qos.channel, "connection", None) is None


def _restore_unacked(self: Any, client: Any = None) -> Any:
    if client is None and getattr(self.channel.connection, "client", None) is None:
        return _defer(self)
    try:
        return _original_restore(self, client)
    except BROKER_LOST:
        return _defer(self)


def _defer(qos: Any) -> None:
    """Keep the tags of what ``qos`` received and did not ack, for :func:`restore_deferred`."""
    tags = [str(tag) for tag in qos._delivered]
    if len(_deferred) + len(tags) <= DEFERRED_MAX:
        _deferred.update(tags)
    log.warning(
        "broker connection already gone; %d received message(s) go back on their "
        "queues when it returns",
        len(tags),
    )


def restore_deferred(channel: Any, running: set[str]) -> int:
    """Put back on their queues the messages a closed channel could not, except
    the ``running`` ones (their task will end, and ack, here); how many."""
    tags = [tag for tag in _deferred if tag not in running]
    _deferred.clear()
    for tag in tags:
        channel.qos.restore_by_tag(tag)  # a tag acked meanwhile is simply gone
    return len(tags)


class RestoreAfterReconnect(bootsteps.StartStopStep):
    """Consumer bootstep: after each (re)connection, :func:`restore_deferred`."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def start(self, c: Any) -> None:
        if not _deferred:
            return
        running = {str(r.message.delivery_tag) for r in tuple(active_requests)}
        restored = restore_deferred(c.task_consumer.channel, running)
        if restored:
            log.warning(
                "put back %d message(s) received before the broker connection "
                "dropped and never started",
                restored,
            )


def _ack(self: Any, delivery_tag: Any) -> None:
    if _closed(self):
        log.warning(
            "message %s was received before the broker connection dropped; it cannot be "
            "acknowledged now and will be redelivered after the visibility timeout "
            "(a finished node's copy is then dropped)",
            delivery_tag,
        )
        return
    _original_ack(self, delivery_tag)


def _reject(self: Any, delivery_tag: Any, requeue: bool = False) -> None:
    if _closed(self):
        _ack(self, delivery_tag)
        return
    _original_reject(self, delivery_tag, requeue)


def _drop(reason: str, raw: Any) -> None:
    shown = repr(raw)
    shown = shown if len(shown) <= SHOWN_CHARS else shown[: SHOWN_CHARS - 3] + "..."
    log.error("refused a malformed item on the broker (%s): %s; dropped", reason, shown)


def _parse_popped(text: Any) -> Any:
    """kombu's ``loads`` in its Redis transport: an item that is not JSON is dropped."""
    try:
        return _original_loads(text)
    except ValueError:
        _drop("not JSON", text)
        raise Empty() from None


def envelope_problem(payload: Any) -> str | None:
    """Why ``payload`` is not an envelope kombu can build a message from, or None."""
    if not isinstance(payload, dict):
        return "not a JSON object"
    properties = payload.get("properties")
    if not isinstance(properties, dict) or "delivery_tag" not in properties:
        return "no properties with a delivery tag"
    if not isinstance(properties.get("delivery_info"), dict):
        return "no delivery info"
    if not isinstance(payload.get("headers", {}), dict | None):
        return "headers are not an object"
    body, encoding = payload.get("body"), properties.get("body_encoding")
    if body is not None and not isinstance(body, str):
        return "body is not a string"
    if encoding not in (None, "utf-8", "base64"):
        return f"unknown body encoding {str(encoding)[:40]!r}"
    if body and encoding == "base64":
        try:
            base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            return "body is not base64"
    return None


def _deliver(self: Any, message: Any, queue: Any) -> Any:
    problem = envelope_problem(message)
    if problem is not None:
        _drop(problem, message)
        return None
    return _original_deliver(self, message, queue)


def guard_restore_on_close() -> None:
    """Install the guards (idempotent); workers call it at start-up."""
    if kombu_redis.QoS.restore_unacked is not _restore_unacked:
        kombu_redis.QoS.restore_unacked = _restore_unacked  # type: ignore[method-assign]
        kombu_redis.QoS.ack = _ack  # type: ignore[method-assign]
        kombu_redis.QoS.reject = _reject  # type: ignore[method-assign]
        setattr(kombu_redis, "loads", _parse_popped)  # noqa: B010
        kombu_redis.Transport._deliver = _deliver  # type: ignore[method-assign]


def unacked_on_redis_clock(settings: Settings) -> None:
    """Stamp and judge kombu's unacknowledged messages on Redis' clock (the module
    docstring); a broker other than ``settings.redis_url`` keeps kombu's own."""
    if settings.broker == settings.redis_url:
        setattr(kombu_redis, "time", partial(settings_now, settings))  # noqa: B010
