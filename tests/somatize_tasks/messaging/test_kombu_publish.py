"""Publishing on kombu's Redis transport: one client per channel, and messages that
ride in a transaction of ours (somatize_tasks.messaging.kombu_publish)."""

from __future__ import annotations

import uuid

from somatize_tasks.config.connections import redis_client
from somatize_tasks.config.keys import NODE_TASK
from somatize_tasks.config.settings import Settings
from somatize_tasks.messaging.celery_app import create_app
from somatize_tasks.messaging.kombu_publish import can_publish_into, publishing_into


def test_publishes_share_one_client_per_channel_until_the_pool_changes(settings: Settings) -> None:
    app = create_app(settings)
    with app.producer_or_acquire() as producer:
        channel = producer.channel
        with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
            assert first is second
        given = object()
        with channel.conn_or_acquire(given) as passed:
            assert passed is given
        channel._disconnect_pools()  # what kombu does when the connection drops
        with channel.conn_or_acquire() as after:
            assert after is not first and after.connection_pool is channel.pool


def test_a_message_published_into_a_transaction_goes_out_with_it(settings: Settings) -> None:
    app = create_app(settings)
    client = redis_client(settings)
    queue = f"{settings.key_prefix}.fold.{uuid.uuid4().hex[:8]}"
    marker = f"{queue}:marker"
    pipe = client.pipeline()
    pipe.set(marker, 1)
    try:
        with app.producer_or_acquire() as producer:
            assert can_publish_into(producer)
            with publishing_into(producer, pipe):
                app.send_task(
                    NODE_TASK,
                    kwargs={"run_id": "r"},
                    queue=queue,
                    producer=producer,
                    ignore_result=True,
                )
        assert client.llen(queue) == 0, "nothing goes out before the transaction"
        pipe.execute()
        assert client.llen(queue) == 1 and client.get(marker) == b"1"
    finally:
        client.delete(queue, marker, f"_kombu.binding.{queue}")


def test_a_publish_that_raises_sends_nothing(settings: Settings) -> None:
    app = create_app(settings)
    client = redis_client(settings)
    queue = f"{settings.key_prefix}.fold.{uuid.uuid4().hex[:8]}"
    pipe = client.pipeline()
    try:
        with app.producer_or_acquire() as producer:
            try:
                with publishing_into(producer, pipe):
                    app.send_task(
                        NODE_TASK,
                        kwargs={"run_id": "r"},
                        queue=queue,
                        producer=producer,
                        ignore_result=True,
                    )
                    raise RuntimeError("recording failed")
            except RuntimeError:
                pass
            # The producer publishes at once again afterwards (no batch left behind).
            app.send_task(
                NODE_TASK,
                kwargs={"run_id": "r"},
                queue=queue,
                producer=producer,
                ignore_result=True,
            )
        assert client.llen(queue) == 1
    finally:
        client.delete(queue, f"_kombu.binding.{queue}")
