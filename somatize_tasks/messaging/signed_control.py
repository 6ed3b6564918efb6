"""Signed remote-control commands: ``shutdown``, ``revoke`` and the rest need the key too.

Celery's remote control (the ``pidbox`` fanout: ``revoke`` with terminate,
``shutdown``, ``pool_restart``, ``inspect``...) is a second way into every
worker, beside task messages. With ``SOMATIZE_MESSAGE_KEY`` set, each command
this app sends (``PlanRun.cancel``'s revoke, Flower's buttons, ``celery
inspect``) carries the same kind of signature as a task message
(:mod:`somatize_tasks.messaging.signing`, over the whole command: method, arguments,
destination, reply address), and a worker with keys ignores a command
without a valid one, logging one line. Replies (worker to caller) are not
signed.

Each command also carries a nonce and an expiry under its signature
(``somatize_message``, ``SOMATIZE_CONTROL_TTL_S`` from its sending): a worker acts on
one only before it expires (Redis' clock) and once (the nonce is kept in Redis,
per worker, until then), so a captured ``shutdown`` published again does nothing.
"""

from __future__ import annotations

import logging
import uuid
from time import time
from typing import Any

from celery.app.control import Control
from kombu.common import maybe_declare
from kombu.pidbox import Mailbox, Node
from redis import Redis

from somatize_tasks.config.clock import settings_now
from somatize_tasks.config.connections import redis_client
from somatize_tasks.config.settings import Settings
from somatize_tasks.messaging.celery_app import settings_of
from somatize_tasks.messaging.replay import ReplayGuard
from somatize_tasks.messaging.signing import (
    HEADER,
    MESSAGE,
    SIGNED,
    check2,
    message_guard_of,
    sign,
    sign2,
    signing_key,
    verification_keys,
)

log = logging.getLogger(__name__)
#: What a control command is signed as (in place of a task name), with no task id.
CONTROL = "celery.control"


class SignedNode(Node):
    """A worker's end of the mailbox: runs only commands whose signature holds."""

    def handle_message(self, body: Any, message: Any = None) -> Any:
        keys: list[bytes] = getattr(self.mailbox, "verification_keys", [])
        if keys:
            headers = (message.headers if message is not None else None) or {}
            reason = check2(keys, {**headers, "task": CONTROL, "id": ""}, body)
            if reason is None:
                reason = self._take(headers)
            if reason is not None:
                method = body.get("method") if isinstance(body, dict) else "?"
                log.error("refused control command %s: %s; ignored", method, reason)
                return None
        return super().handle_message(body, message)

    def _take(self, headers: dict[str, Any]) -> str | None:
        """Why this command must not act here: expired, or acted on before (a replay)."""
        guard = message_guard_of(headers)
        mailbox: Any = self.mailbox
        replays: ReplayGuard | None = mailbox.replay_guard()
        if guard is None or replays is None:
            return None if guard is not None else "no nonce"
        node = str(getattr(self, "hostname", "") or "?")
        answer = replays.take_key(replays.keys.control_taken(node, guard[0]), guard[1])
        if answer == "new":
            return None
        if answer == "expired":
            return "expired (its signed expiry has passed): a late replay"
        return f"nonce {guard[0]} was acted on here already: a replayed command"


class SignedMailbox(Mailbox):
    """kombu's mailbox, whose published commands carry a signature header."""

    node_cls = SignedNode
    signing_key: bytes | None = None
    verification_keys: list[bytes] = []  # set per instance by SignedControl
    settings: Settings | None = None
    _replays: ReplayGuard | None = None

    def replay_guard(self) -> ReplayGuard | None:
        """The nonce taker of this process (built on first use; None without settings).
        Its taker is the worker id alone: a command acts once per worker id."""
        if self._replays is None and self.settings is not None:
            client: Redis[bytes] = redis_client(self.settings)
            self._replays = ReplayGuard(client, self.settings, lambda _: True)
            self._replays.taker = f"{self.settings.worker_id}|control"
        return self._replays

    def _publish(
        self,
        type: str,
        arguments: dict[str, Any],
        destination: Any = None,
        reply_ticket: str | None = None,
        channel: Any = None,
        timeout: float | None = None,
        serializer: str | None = None,
        producer: Any = None,
        pattern: str | None = None,
        matcher: str | None = None,
    ) -> None:
        """kombu 5.7's ``Mailbox._publish``, with the signature added to its headers."""
        box: Any = self  # kombu's stubs leave out what a bound mailbox always has
        message: dict[str, Any] = {
            "method": type,
            "arguments": arguments,
            "destination": destination,
            "pattern": pattern,
            "matcher": matcher,
        }
        chan = channel or box.connection.default_channel
        if reply_ticket:
            maybe_declare(box.reply_queue(chan))
            message.update(
                ticket=reply_ticket,
                reply_to={"exchange": box.reply_exchange.name, "routing_key": box.oid},
            )
        headers: dict[str, Any] = {
            "clock": box.clock.forward(),
            "expires": time() + timeout if timeout else 0,
        }
        if self.signing_key is not None:
            # Judged on Redis' clock (messaging.replay), so stamped with it.
            ttl, now = 60.0, time()
            if self.settings is not None:
                ttl, now = self.settings.control_ttl_s, settings_now(self.settings)
            headers[MESSAGE] = {"id": uuid.uuid4().hex, "exp": now + ttl}
            headers[HEADER] = sign(self.signing_key, CONTROL, "", message)  # workers before v2
            headers[SIGNED] = sign2(self.signing_key, CONTROL, "", message, headers)
        with box.producer_or_acquire(producer, chan) as prod:
            prod.publish(
                message,
                exchange=box.exchange.name,
                declare=[box.exchange],
                headers=headers,
                serializer=serializer or box.serializer,
                retry=True,
            )


class SignedControl(Control):
    """The app's remote control, over a :class:`SignedMailbox` keyed from its settings."""

    Mailbox = SignedMailbox

    def __init__(self, app: Any = None) -> None:
        super().__init__(app)
        settings = settings_of(app)
        mailbox: Any = getattr(self, "mailbox")  # noqa: B009  # not in celery's stubs
        mailbox.signing_key = signing_key(settings)
        mailbox.verification_keys = verification_keys(settings)
        mailbox.settings = settings
