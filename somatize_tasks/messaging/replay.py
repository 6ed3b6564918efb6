"""Replays refused: a signed task message runs once, whoever copies it back.

A signature binds a message's content, not its delivery, so anyone who can write
to the broker could publish a captured message again. Every signed message
carries an id and an expiry under its signature (``somatize_message``,
:mod:`somatize_tasks.messaging.signing`); before a worker lets a message reach its
task, it takes that id in Redis (``<p>:msg:<id>``, remembered until the
message expires: a bounded set), in one script judged on Redis' clock
(``take_message.lua``):

- an expired message is refused;
- an id no worker took is taken, and the message runs;
- an id a live worker took is a replay or a duplicate: refused, one log line;
- an id whose taker is dead (its heartbeat expired, or it was an earlier process of
  this worker id) is a redelivery after a real death: taken again, and it runs;
- an id this very process took runs again only when this process no longer holds
  the task (the prefork pool lost the child that ran it, and Celery put the message
  back): a copy that arrives while the task still runs here is refused.

Whether a restart of a message is a node death is decided from the run's own
records (:mod:`somatize_tasks.runtime.recovery.deaths`), never from the broker.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable

from redis import Redis

from somatize_tasks.config.keys import RedisKeys
from somatize_tasks.config.settings import Settings
from somatize_tasks.lua import script

#: Kept after a message's expiry, so a clock a little off cannot reopen an id.
MARGIN_MS = 60_000


#: Tells apart processes with the same host name and pid (two containers, say).
_TOKEN = uuid.uuid4().hex[:6]


def instance_id() -> str:
    """This worker process, ``host:pid:token``: a restarted worker with the same id is
    another taker, and another heartbeat writer (``workers.identity``)."""
    return f"{socket.gethostname()}:{os.getpid()}:{_TOKEN}"


class ReplayGuard:
    """Takes message ids for one worker (its main process, where messages arrive)."""

    def __init__(
        self, client: Redis[bytes], settings: Settings, holds: Callable[[str], bool]
    ) -> None:
        self.client = client
        self.keys = RedisKeys(settings.key_prefix)
        self.worker_id = settings.worker_id
        self.taker = f"{settings.worker_id}|{instance_id()}"
        self.heartbeat_ms = int(settings.heartbeat_ttl_s * 1000)
        #: Whether this process still holds a task id (received and not finished).
        self.holds = holds

    def take(self, message_id: str, expiry: float, task_id: str) -> str | None:
        """Why the message must not run (expired, or taken by a live worker), or None."""
        answer = self.take_key(self.keys.message_taken(message_id), expiry)
        if answer in ("new", "retaken"):
            return None
        if answer == "expired":
            return "expired (its signed expiry has passed): a late replay"
        if answer == "mine":
            if self.holds(task_id):
                return f"message id {message_id} is running here already: a replayed copy"
            return None  # this process lost the child running it: Celery gave it back
        taker = answer.removeprefix("taken:")
        return f"message id {message_id} was taken by live worker {taker}: a replayed copy"

    def take_key(self, key: str, expiry: float) -> str:
        """``take_message.lua`` on ``key``: its one-word answer."""
        found = script(self.client, "take_message")(
            keys=[key, self.keys.workers_seen],
            args=[self.taker, self.worker_id, repr(expiry), self.heartbeat_ms, MARGIN_MS],
        )
        return found.decode() if isinstance(found, bytes) else str(found)
