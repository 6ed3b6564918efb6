"""A batch's next block starts in the round trip that records the block before it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from redis import Redis

from scheduler import load_plan
from somatize_tasks.config.connections import redis_client
from somatize_tasks.config.keys import RedisKeys
from somatize_tasks.config.settings import Settings
from somatize_tasks.messaging.celery_app import create_app
from somatize_tasks.runtime.engine.context import run_context
from somatize_tasks.runtime.producer.submit import submit_plan
from somatize_tasks.runtime.state.redis_state import RedisRunState
from somatize_tasks.runtime.state.run_state import LeafResult
from somatize_tasks.workers.reservations import reservation_field, reservation_keys
from testkit.plans import ex, par, seq
from testkit.services import start_redis_server
from testkit.workers import WorkerProcess


def running_state(client: Redis[bytes], prefix: str) -> RedisRunState:
    state = RedisRunState(client, RedisKeys(prefix), uuid.uuid4().hex[:12], 60)
    state.client.hset(state.meta, mapping={"status": "running", "version": 3})
    return state


def result(node_id: str) -> LeafResult:
    return LeafResult(output={"value": 1}, node_outputs={node_id: {"value": 1}}, worker_id="w1")


def test_the_next_start_rides_with_the_record(settings: Settings) -> None:
    state = running_state(redis_client(settings), f"{settings.key_prefix}:st{uuid.uuid4().hex[:4]}")
    slots = reservation_keys(RedisKeys(state.meta.split(":run:")[0]))
    state.client.hset(slots[0], reservation_field("w1", state.run_id), 2)
    start = state.pending_start(["b"], "w1", 1, 0, "t1", release_slot=True)
    assert not start.sent
    assert state.record_leaf(0, 0, ["a"], result("a")) is True
    assert start.sent and start.version == 3
    assert json.loads(state.client.hget(state.nodes, "b") or b"{}")["state"] == "running"
    assert state.client.hget(slots[0], reservation_field("w1", state.run_id)) == b"1"
    # Sent once: the next record goes alone.
    assert state.start_next is None and state.record_leaf(1, 0, ["b"], result("b")) is True
    state.client.delete(*state.all_keys(), *slots)


def test_a_stale_next_block_is_told_not_to_run(settings: Settings) -> None:
    state = running_state(redis_client(settings), f"{settings.key_prefix}:st{uuid.uuid4().hex[:4]}")
    state.client.hset(state.nodes, "b", '{"state": "pending", "task_id": "other"}')
    start = state.pending_start(["b"], "w1", 1, 0, "t1")
    state.record_leaf(0, 0, ["a"], result("a"))
    assert start.sent and start.version is None
    state.client.delete(*state.all_keys())


def test_a_first_start_rides_with_the_program_read(settings: Settings) -> None:
    context = run_context(create_app(settings), settings, "w1")
    run_id = uuid.uuid4().hex[:12]
    plan = load_plan({"Execute": {"node_id": "a"}})
    context.redis.hset(
        context.keys.run(run_id),
        mapping={"status": "running", "plan": plan.model_dump_json(), "version": 2},
    )
    assert not context.has_program(run_id)
    start = context.state(run_id).pending_start(["a"], "w1", 0, 0, "t1")
    assert context.program(run_id, start=start) is not None and context.has_program(run_id)
    assert start.sent and start.version == 2
    nodes = context.keys.run(run_id, "nodes")
    assert json.loads(context.redis.hget(nodes, "a") or b"{}")["state"] == "running"
    context.redis.delete(*context.state(run_id).all_keys())


@pytest.fixture
def private_redis() -> Iterator[Redis[bytes]]:
    proc, port = start_redis_server()
    try:
        yield Redis(port=port)
    finally:
        proc.kill()
        proc.wait()


def test_scripts_redis_forgot_are_sent_again(private_redis: Redis[bytes]) -> None:
    state = running_state(private_redis, "forgot")
    state.mark_running(["a"], "w1", 0, 0, "t1")  # loads the scripts
    private_redis.script_flush()  # a restart, say
    start = state.pending_start(["b"], "w1", 1, 0, "t1")
    assert state.record_leaf(0, 0, ["a"], result("a")) is True
    assert start.sent and start.version == 3


def test_a_wide_fork_join_in_batches_runs_every_branch_once(
    settings: Settings,
    two_workers: tuple[WorkerProcess, WorkerProcess],
) -> None:
    names = [f"b{i}" for i in range(40)]
    plan = seq(par(*[ex(n) for n in names]), ex("rt_join"))
    run = submit_plan(
        plan, input=1, ops=dict.fromkeys(names, "rt_add"), settings=settings, require_workers=True
    )
    assert run.wait(timeout=60) == {"keys": sorted(names), "total": 80.0}
    nodes = run._context.redis.hgetall(run._context.keys.run(run.id, "nodes"))
    states = {k.decode(): json.loads(v) for k, v in nodes.items()}
    assert all(states[n]["state"] == "done" for n in names)
    assert all(states[n]["started_at"] <= states[n]["ended_at"] for n in names)
