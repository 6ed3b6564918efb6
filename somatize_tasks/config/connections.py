"""Redis clients built from settings: one place that knows about TLS options."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from redis import Redis
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from somatize_tasks.config.settings import Settings, redacted_url
from somatize_tasks.errors import RedisUnreachableError

T = TypeVar("T")


def redis_client(settings: Settings, **options: Any) -> Redis[bytes]:
    """A client for ``settings.redis_url``; ``rediss://`` gets the configured TLS checks.

    Clients are cheap wrappers over a connection pool: build one per
    component and reuse it, never one per call.
    """
    if settings.redis_url.startswith("rediss://"):
        options.setdefault("ssl_cert_reqs", settings.redis_ssl_cert_reqs)
        if settings.redis_ssl_ca_certs is not None:
            options.setdefault("ssl_ca_certs", str(settings.redis_ssl_ca_certs))
    options.setdefault("socket_connect_timeout", 5.0)
    options.setdefault("health_check_interval", 30)
    return Redis.from_url(settings.redis_url, **options)


def reaching_redis(settings: Settings, call: Callable[[], T]) -> T:
    """``call()``, with a connection failure (or no answer) turned into an error naming
    the server (its password masked) and what to check: what a producer shows its user."""
    try:
        return call()
    except (RedisConnectionError, RedisTimeoutError) as exc:
        raise RedisUnreachableError(
            f"cannot reach Redis at {redacted_url(settings.redis_url)}: {_one_line(exc)}. "
            "Is it running, and is SOMATIZE_REDIS_URL right?"
        ) from None


#: Seconds one probe of a silent Redis waits for its answer (:func:`await_redis`).
PROBE_S = 2.0
#: Probe clients by Redis URL: short timeouts, no retries of their own.
_probes: dict[str, Redis[bytes]] = {}


def await_redis(settings: Settings) -> None:
    """Return once Redis answers, asking with backoff for up to ``SOMATIZE_REDIS_RETRY_S``
    (a Redis restarting, failing over or paused by a VM freeze may be back in a
    moment); then a :class:`RedisUnreachableError` of one line naming it. What a producer does
    before it starts anything: before, a paused Redis gave a bare ``TimeoutError:
    Timeout reading from socket`` after 5 s, and a connection already open hung."""
    probe = _probes.get(settings.redis_url)
    if probe is None:
        probe = _probes[settings.redis_url] = redis_client(
            settings,
            socket_timeout=PROBE_S,
            socket_connect_timeout=PROBE_S,
            health_check_interval=0,
            retry=Retry(NoBackoff(), 0),
        )
    budget_s = settings.redis_retry_s
    deadline = time.monotonic() + budget_s
    pause = 0.2
    while True:
        try:
            probe.ping()
            return
        except (RedisError, OSError) as exc:  # refused, silent, or loading its data
            last = exc
        left = deadline - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(pause, left))  # and one more try at the deadline
        pause = min(2 * pause, 2.0)
    raise RedisUnreachableError(
        f"cannot reach Redis at {redacted_url(settings.redis_url)}: no answer for "
        f"{budget_s:g} s ({_one_line(last)}). Is it running and not paused, is "
        "SOMATIZE_REDIS_URL right, and is SOMATIZE_REDIS_RETRY_S long enough?"
    )


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
