"""Redis clients built from settings: one place that knows about TLS options."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

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
    """``call()``, with a connection failure turned into an error naming the server
    (its password masked) and what to check: what a producer shows its user."""
    try:
        return call()
    except RedisConnectionError as exc:
        raise RedisUnreachableError(
            f"cannot reach Redis at {redacted_url(settings.redis_url)}: {exc}. "
            "Is it running, and is SOMATIZE_REDIS_URL right?"
        ) from None
