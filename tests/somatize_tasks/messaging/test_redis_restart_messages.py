"""Messages in flight when Redis restarts (with its append-only file) are not lost.

- A message a worker had received but not started when the connection
  dropped goes back on its queue once the broker is back (Celery forgets it,
  and Redis would hand it out again only after the visibility timeout, an
  hour); one still running stays where it is.
- A publish made while Redis is down (a transfer chain's next step, an
  errback) waits for it, as tasks do, instead of giving up after 0.6 s.
- A worker writes its message key ids again once Redis is back.

Each test has a redis-server of its own on a free port, never the shared one.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from typing import Any

import pytest
from kombu import Connection, Consumer, Producer, Queue
from redis import Redis

from scheduler import WorkerInfo
from somatize_tasks.config.keys import RedisKeys
from somatize_tasks.config.settings import Settings
from somatize_tasks.messaging import kombu_compat
from somatize_tasks.messaging.celery_app import create_app
from somatize_tasks.workers.heartbeat import Heart
from somatize_tasks.workers.registry import Registry
from tests.conftest import OwnRedis

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]


def _receive(url: str, queue: Queue, count: int) -> tuple[Connection, Any, list[Any]]:
    """A consumer that took ``count`` messages off ``queue`` and acked none."""
    connection = Connection(url)
    channel = connection.channel()
    got: list[Any] = []
    consumer = Consumer(channel, [queue], callbacks=[lambda _body, message: got.append(message)])
    consumer.consume()
    deadline = time.monotonic() + 10
    while len(got) < count and time.monotonic() < deadline:
        connection.drain_events(timeout=1)
    assert len(got) == count
    return connection, channel, got


def test_messages_received_but_not_started_go_back_when_the_broker_returns(
    own_redis: OwnRedis,
) -> None:
    kombu_compat.guard_restore_on_close()
    queue = Queue("rq-restore", routing_key="rq-restore")
    with Connection(own_redis.url) as connection:
        producer = Producer(connection.channel())
        for n in range(2):
            producer.publish({"n": n}, routing_key="rq-restore", declare=[queue], serializer="json")
    connection, channel, (started, waiting) = _receive(own_redis.url, queue, 2)
    client = Redis.from_url(own_redis.url)
    assert client.llen("rq-restore") == 0 and client.hlen("unacked") == 2
    own_redis.stop()
    channel.close()  # what the consumer does when the connection drops: the restore fails
    connection.release()
    own_redis.start()
    assert client.hlen("unacked") == 2, "Redis kept the unacked index (AOF)"
    with Connection(own_redis.url) as back:
        restored = kombu_compat.restore_deferred(back.channel(), {started.delivery_tag})
    assert restored == 1
    # The one not started is back on its queue; the running one is still unacked.
    assert client.llen("rq-restore") == 1
    back_on_queue = json.loads(client.lindex("rq-restore", 0) or b"{}")
    assert back_on_queue["properties"]["delivery_tag"] == waiting.delivery_tag
    assert client.hexists("unacked", started.delivery_tag)
    assert not client.hexists("unacked", waiting.delivery_tag)
    assert kombu_compat.restore_deferred(channel, set()) == 0, "nothing is restored twice"


def test_a_publish_while_redis_is_down_goes_out_when_it_is_back(own_redis: OwnRedis) -> None:
    app = create_app(Settings(redis_url=own_redis.url, key_prefix="pub", redis_retry_s=20))
    errors: list[BaseException] = []

    def publish() -> None:
        try:
            app.send_task("somatize.test.noop", queue="rq-publish", ignore_result=True)
        except BaseException as exc:  # judged below
            errors.append(exc)

    app.send_task("somatize.test.noop", queue="rq-publish", ignore_result=True)  # connected
    own_redis.stop()
    sender = threading.Thread(target=publish)
    sender.start()
    time.sleep(3.0)  # Celery's default policy would have given up after 0.6 s
    own_redis.start()
    sender.join(30)
    assert not sender.is_alive() and not errors, errors
    assert Redis.from_url(own_redis.url).llen("rq-publish") == 2


def test_a_worker_announces_its_keys_again_after_redis_lost_them(own_redis: OwnRedis) -> None:
    # A restart without persistence forgets what a worker wrote once at start (the
    # message key ids producers check); the first beat after failed ones rewrites it.
    registry = Registry(Redis.from_url(own_redis.url, socket_timeout=1), RedisKeys("hk"), 10)
    announced: list[float] = []

    def announce() -> None:
        registry.announce_keys("w1", ["k1"])
        announced.append(time.monotonic())

    info = WorkerInfo(id="w1", name="w1", cpu_cores=1, max_concurrent=1)
    heart = Heart(registry, lambda active: info, interval_s=0.2, on_restored=announce)
    heart.start()
    announce()
    try:
        own_redis.stop()
        time.sleep(1.0)  # beats fail meanwhile
        own_redis.start()
        Redis.from_url(own_redis.url).flushall()  # as if it kept nothing
        deadline = time.monotonic() + 10
        while registry.accepted_keys(["w1"])["w1"] is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert registry.accepted_keys(["w1"]) == {"w1": ["k1"]}
        assert len(announced) == 2
    finally:
        heart.stop(deregister=False)
