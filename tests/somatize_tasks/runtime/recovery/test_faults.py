"""Faults: a worker dies mid-run, a node hangs, Redis loses the run.

Worker deaths use workers of their own, under a key prefix of their own,
so killing them cannot disturb the session's shared workers.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from somatize_tasks.config.connections import redis_client
from somatize_tasks.config.keys import RedisKeys
from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import NodeFailedError, RunError, RunStateLostError
from somatize_tasks.observe.run_record import read_run
from somatize_tasks.observe.timeline import bars_of
from somatize_tasks.runtime.producer.submit import submit_plan
from somatize_tasks.runtime.state.redis_state import RedisRunState
from somatize_tasks.runtime.state.run_state import LeafResult
from somatize_tasks.workers.registry import Registry
from testkit.nodes import run_nodes  # noqa: F401
from testkit.plans import MAKE_SUM, ex, remote, seq
from testkit.services import free_port, wait_for
from testkit.workers import WorkerFactory

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fault_settings(settings: Settings) -> Iterator[Settings]:
    prefix = f"{settings.key_prefix}-ft"
    yield settings.model_copy(update={"key_prefix": prefix, "reroute_grace_s": 3.0})
    client = Redis.from_url(settings.redis_url)
    for key in client.scan_iter(match=f"{prefix}*", count=1000):
        client.delete(key)


@pytest.fixture(scope="module")
def fault_workers(
    fault_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerFactory]:
    factory = WorkerFactory(fault_settings, tmp_path_factory.mktemp("fault-workers"))
    try:
        yield factory
    finally:
        factory.close()


def running_on(run_id_status: object, node_id: str) -> str | None:
    node = run_id_status.nodes[node_id]  # type: ignore[attr-defined]
    return node.worker if node.state == "running" else None


def test_a_killed_workers_nodes_are_rerouted_and_its_lost_outputs_recomputed(
    fault_settings: Settings, fault_workers: WorkerFactory
) -> None:
    workers = {
        w.worker_id: w
        for w in (fault_workers.start("a", tags="cpu"), fault_workers.start("b", tags="cpu"))
    }
    run = submit_plan(
        seq(ex("rt_make"), ex("rt_sleep"), ex("rt_sum")),
        params={"rt_sleep": {"s": 3}},
        settings=fault_settings,
        require_workers=True,
    )
    assert wait_for(lambda: running_on(run.status(), "rt_sleep") is not None, 20)
    victim_id = running_on(run.status(), "rt_sleep")
    assert victim_id is not None
    workers[victim_id].signal_group(signal.SIGKILL)
    started = time.monotonic()
    assert run.wait(timeout=60) == MAKE_SUM
    status = run.status()
    survivor = next(w for w in workers if w != victim_id)
    assert {status.nodes[n].worker for n in ("rt_make", "rt_sleep", "rt_sum")} == {survivor}
    # rt_make's output lived only in the dead worker's cache: it was computed again.
    assert status.nodes["rt_make"].state == "done"
    assert time.monotonic() - started < 30
    # The run's history keeps the dead worker's unfinished attempt: the timeline draws it.
    bars = bars_of(status, read_run(fault_settings, run.id).history)
    sleeps = sorted((b.worker, b.state) for b in bars if b.node_id == "rt_sleep")
    assert sleeps == sorted([(victim_id, "lost"), (survivor, "done")]), sleeps


def test_a_node_pinned_to_a_dead_worker_fails_the_run_after_the_grace_period(
    fault_settings: Settings, fault_workers: WorkerFactory
) -> None:
    pinned = fault_workers.start("pinned", tags="special")
    fault_workers.start("other", tags="cpu")
    plan = {
        "Remote": {
            "node_id": "rt_sleep",
            "target": {"WorkerId": pinned.worker_id},
            "plan": ex("rt_sleep"),
        }
    }
    run = submit_plan(
        plan, input=1, params={"rt_sleep": {"s": 5}}, settings=fault_settings, require_workers=True
    )
    assert wait_for(lambda: running_on(run.status(), "rt_sleep") == pinned.worker_id, 20)
    pinned.signal_group(signal.SIGKILL)
    with pytest.raises(NodeFailedError) as caught:
        run.wait(timeout=60)
    message = str(caught.value)
    assert "rt_sleep" in message and pinned.worker_id in message and "no live worker" in message


def test_a_node_over_its_soft_time_limit_fails_the_run_naming_it(
    settings: Settings, two_workers: object
) -> None:
    limited = settings.model_copy(update={"node_soft_time_limit_s": 1.0})
    run = submit_plan(
        seq(ex("rt_add"), ex("rt_sleep")),
        input=1,
        params={"rt_sleep": {"s": 10}},
        settings=limited,
        require_workers=True,
    )
    with pytest.raises(NodeFailedError) as caught:
        run.wait(timeout=30)
    assert caught.value.node_id == "rt_sleep"
    assert "SoftTimeLimitExceeded" in str(caught.value)


def test_wait_ends_with_a_clear_error_when_redis_lost_the_run(
    settings: Settings, two_workers: object
) -> None:
    run = submit_plan(
        ex("rt_sleep"),
        input=1,
        params={"rt_sleep": {"s": 3}},
        settings=settings,
        require_workers=True,
    )
    state = RedisRunState(redis_client(settings), RedisKeys(settings.key_prefix), run.id, 60)
    state.client.delete(*state.all_keys())
    started = time.monotonic()
    with pytest.raises(RunStateLostError, match="gone from Redis"):
        run.wait(timeout=30)
    assert time.monotonic() - started < 5


def test_an_unreachable_redis_is_named_not_hung_on(settings: Settings) -> None:
    nowhere = settings.model_copy(
        update={"redis_url": f"redis://:secret@127.0.0.1:{free_port()}/0", "redis_retry_s": 2.0}
    )
    started = time.monotonic()
    with pytest.raises(RunError) as caught:
        submit_plan(ex("rt_add"), settings=nowhere)
    assert "cannot reach Redis at redis://:***@127.0.0.1" in str(caught.value)
    assert "secret" not in str(caught.value) and "no answer for 2 s" in str(caught.value)
    assert 2.0 <= time.monotonic() - started < 10  # it waited the retry budget, no more


def test_the_first_completion_wins_and_stale_messages_are_refused(settings: Settings) -> None:
    keys = RedisKeys(settings.key_prefix)
    run_id = uuid.uuid4().hex[:12]
    state = RedisRunState(redis_client(settings), keys, run_id, 60)
    state.client.hset(state.meta, mapping={"status": "running", "version": 3})
    result = LeafResult(output={"value": 1}, node_outputs={"a": {"value": 1}}, worker_id="w1")
    # A block queued under task t2 (it was re-dispatched): a copy under t1 must not run.
    state.client.hset(
        state.nodes, "a", '{"state": "pending", "task_id": "t2", "block": 0, "epoch": 0}'
    )
    assert state.mark_running(["a"], "w1", 0, 0, "t1") is None
    assert state.mark_running(["a"], "w2", 0, 0, "t2") == 3
    assert state.record_leaf(0, 0, ["a"], result) is True
    assert state.record_leaf(0, 0, ["a"], result) is False  # a duplicate completion is dropped
    assert state.mark_running(["a"], "w1", 0, 0, "t2") is None  # done: never runs again
    state.client.delete(*state.all_keys())


def _redis_on(port: int, password: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--requirepass",
            password,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://:{password}@127.0.0.1:{port}/0"
    assert wait_for(lambda: _pings(url), 10), "redis-server did not start"
    return proc


def _pings(url: str) -> bool:
    try:
        return bool(Redis.from_url(url, socket_connect_timeout=0.2).ping())
    except Exception:
        return False


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs a redis-server binary")
def test_redis_restarted_mid_run_workers_come_back_and_the_lost_run_fails_clearly(
    tmp_path: Path,
) -> None:
    password = "s3cret-pw"
    port = free_port()
    server = _redis_on(port, password)
    settings = Settings(
        redis_url=f"redis://:{password}@127.0.0.1:{port}/0",
        key_prefix="restart",
        heartbeat_interval_s=0.5,
        store_kind="local",
        store_dir=tmp_path / "store",
        cache_dir=tmp_path / "cache",
        worker_id="restart-producer",
    )
    factory = WorkerFactory(settings, tmp_path)
    try:
        worker = factory.start("solo", tags="cpu")
        assert (
            submit_plan(ex("rt_add"), input=1, settings=settings, require_workers=True).wait(30)
            == 2
        )
        run = submit_plan(
            ex("rt_sleep"),
            input=1,
            params={"rt_sleep": {"s": 3}},
            settings=settings,
            require_workers=True,
        )
        server.kill()
        server.wait()
        server = _redis_on(port, password)  # empty: the run's state is gone
        started = time.monotonic()
        with pytest.raises(RunStateLostError):
            run.wait(timeout=30)
        assert time.monotonic() - started < 10
        registry = Registry.from_settings(settings)
        back = wait_for(lambda: any(w.info.id == worker.worker_id for w in registry.live()), 45)
        assert back, f"the worker never heartbeat again after the restart:\n{worker.log()[-3000:]}"
        after = submit_plan(ex("rt_add"), input=5, settings=settings, require_workers=True)
        assert after.wait(timeout=60) == 6
        assert password not in worker.log()
    finally:
        factory.close()
        server.kill()
        server.wait()


def test_a_transfer_that_keeps_failing_fails_the_run_naming_the_store(
    settings: Settings, tmp_path: Path
) -> None:
    broken = settings.model_copy(
        update={
            "key_prefix": f"{settings.key_prefix}-s3down",
            "s3_endpoint_url": f"http://127.0.0.1:{free_port()}",
            "transfer_max_retries": 1,
            "transfer_retry_backoff_max_s": 0.2,
        }
    )
    factory = WorkerFactory(broken, tmp_path)
    try:
        factory.start("ta", tags="ta")
        factory.start("tb", tags="tb")
        plan = seq(ex("rt_make"), remote("tb", ex("rt_sum")))
        run = submit_plan(plan, settings=broken, require_workers=True)
        with pytest.raises(NodeFailedError) as caught:
            run.wait(timeout=60)
        message = str(caught.value)
        assert "could not move an input of node 'rt_sum'" in message
        assert str(broken.s3_endpoint_url) in message and str(broken.s3_bucket) in message
        assert str(broken.s3_secret_access_key.get_secret_value()) not in message  # type: ignore[union-attr]
    finally:
        factory.close()


def test_a_node_over_its_hard_time_limit_fails_the_run_naming_it(
    settings: Settings, two_workers: object
) -> None:
    limited = settings.model_copy(update={"node_time_limit_s": 1.0})
    run = submit_plan(
        ex("rt_sleep"),
        input=1,
        params={"rt_sleep": {"s": 30}},
        settings=limited,
        require_workers=True,
    )
    started = time.monotonic()
    with pytest.raises(NodeFailedError) as caught:
        run.wait(timeout=30)
    assert "node 'rt_sleep' ran past its time limit of 1 s" in str(caught.value)
    assert time.monotonic() - started < 15
