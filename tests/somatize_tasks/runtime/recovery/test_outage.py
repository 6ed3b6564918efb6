"""Riding out a lost Redis: a bounded wait, then the work again (or the error)."""

from __future__ import annotations

import time

import pytest
from redis import Redis
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.retry import Retry

from somatize_tasks.runtime.recovery.outage import through_redis_outages, wait_for_redis
from testkit.services import free_port


def test_work_that_lost_redis_is_done_again_once_it_answers(redis_url: str) -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise RedisConnectionError("Connection closed by server.")
        return "done"

    assert through_redis_outages(Redis.from_url(redis_url), 5.0, flaky, "test") == "done"
    assert len(calls) == 2


def test_a_redis_that_never_comes_back_gives_up_within_the_bound() -> None:
    # No retries inside redis-py (its default adds about 4 s to each failed command).
    dead = Redis(port=free_port(), socket_connect_timeout=0.1, retry=Retry(NoBackoff(), 0))
    started = time.monotonic()
    assert wait_for_redis(dead, started + 1.0) is False
    with pytest.raises(RedisConnectionError):
        through_redis_outages(dead, 1.0, dead.ping, "test")
    assert time.monotonic() - started < 3.0


def test_an_error_that_is_not_a_lost_connection_is_not_retried(redis_url: str) -> None:
    calls: list[int] = []

    def refused() -> None:
        calls.append(1)
        raise ResponseError("WRONGTYPE")

    with pytest.raises(ResponseError):
        through_redis_outages(Redis.from_url(redis_url), 5.0, refused, "test")
    assert len(calls) == 1
