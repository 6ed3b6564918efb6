"""Riding out a Redis restart inside a task, instead of losing the task's work.

A node task whose Redis connection drops (Redis restarted, failed over, or
still loading its append-only file) used to raise ``ConnectionError``; Celery
then acknowledged the message and the node stayed ``running`` for ever.
:func:`through_redis_outages` waits instead, pinging with backoff (0.5 s
doubling to 5 s), for at most ``redis_retry_s``, then does the task's work
again. Doing it again is safe: ``mark_running`` accepts the same task id
again, and a step that did reach Redis before the drop is refused the
second time (a done block is skipped, an arrived transfer is not counted
twice).

The bound is checked between pings, and each ping of a dead server takes
redis-py's own retries (about 4 s with its defaults), so a wait may end that
much past it. Past the bound the error propagates; the message was never acknowledged on
a live channel, so Redis (if it kept its data) redelivers it after the
visibility timeout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger(__name__)
T = TypeVar("T")
FIRST_PAUSE_S = 0.5
LONGEST_PAUSE_S = 5.0
#: The errors that mean "Redis went away", not "Redis said no".
LOST = (RedisConnectionError, RedisTimeoutError)


def wait_for_redis(client: Redis[bytes], deadline: float) -> bool:
    """Ping ``client`` with backoff until it answers (True) or ``deadline`` passes."""
    pause = FIRST_PAUSE_S
    while True:
        try:
            if client.ping():
                return True
        except RedisError:  # refused, reset, or still loading its data (BusyLoadingError)
            pass
        if time.monotonic() + pause > deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, LONGEST_PAUSE_S)


def through_redis_outages(
    client: Redis[bytes], budget_s: float, action: Callable[[], T], what: str
) -> T:
    """``action()``, done again each time it fails because Redis went away and came back
    within ``budget_s`` of the first failure."""
    deadline: float | None = None
    while True:
        try:
            return action()
        except LOST as exc:
            deadline = deadline or time.monotonic() + budget_s
            log.warning(
                "%s: lost Redis (%s); retrying once it is back (waiting up to %.0f s,"
                " SOMATIZE_REDIS_RETRY_S)",
                what,
                exc,
                budget_s,
            )
            if not wait_for_redis(client, deadline):
                raise
            log.warning("%s: Redis is back; retrying", what)
