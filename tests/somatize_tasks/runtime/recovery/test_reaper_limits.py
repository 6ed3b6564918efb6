"""Limits the reaper enforces on real workers: poison nodes, orphans, deadlines, TTLs.

Workers that get killed run under a key prefix of their own, so their
deaths never disturb the session's shared workers.
"""

from __future__ import annotations

import json
import logging
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from redis import Redis

from somatize_tasks.cli import main
from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import KilledWorkerError, PlanInputError, RunDeadlineError
from somatize_tasks.runtime.engine.dispatch import CeleryDispatcher
from somatize_tasks.runtime.producer.local import run_local
from somatize_tasks.runtime.producer.submit import submit_plan
from somatize_tasks.runtime.state.redis_state import RedisRunState
from somatize_tasks.workers.registry import Registry
from testkit.nodes import run_nodes  # noqa: F401
from testkit.plans import ex, par, remote, seq
from testkit.services import wait_for
from testkit.workers import WorkerFactory, WorkerProcess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def own_settings(settings: Settings) -> Iterator[Settings]:
    prefix = f"{settings.key_prefix}-lim"
    yield settings.model_copy(update={"key_prefix": prefix})
    client = Redis.from_url(settings.redis_url)
    for key in client.scan_iter(match=f"{prefix}*", count=1000):
        client.delete(key)


@pytest.fixture(scope="module")
def own_workers(
    own_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerFactory]:
    factory = WorkerFactory(own_settings, tmp_path_factory.mktemp("limit-workers"))
    try:
        yield factory
    finally:
        factory.close()


def _live_ids(settings: Settings) -> set[str]:
    return {seen.info.id for seen in Registry.from_settings(settings).live()}


def test_a_node_that_kills_its_pool_process_fails_the_run_after_three_deaths(
    own_settings: Settings, own_workers: WorkerFactory
) -> None:
    # Under prefork only the pool child dies; Celery puts the message back
    # (task_reject_on_worker_lost) and the worker itself lives on.
    worker = own_workers.start("prefork", tags="poison-a", concurrency=1)
    plan = {
        "Remote": {"node_id": "rt_suicide", "target": {"Tag": "poison-a"}, "plan": ex("rt_suicide")}
    }
    started = time.monotonic()
    run = submit_plan(plan, input=1, settings=own_settings, require_workers=True)
    with pytest.raises(KilledWorkerError) as caught:
        run.wait(timeout=90)
    message = str(caught.value)
    assert caught.value.node_id == "rt_suicide"
    assert "died 3 times" in message and message.count(worker.worker_id) >= 3, message
    assert run.status().nodes["rt_suicide"].state == "failed", (
        run._state.client.hgetall(run._state.nodes),
        worker.log()[-4000:],
    )
    assert worker.proc.poll() is None and worker.worker_id in _live_ids(own_settings)
    assert worker.log().count("exited with 'signal 9 (SIGKILL)'") == 3, worker.log()[-3000:]
    redelivered = worker.log().count("lost its worker process")
    print(
        f"prefork: 3 child deaths ({redelivered} seen on redelivery) -> KilledWorker in "
        f"{time.monotonic() - started:.1f} s"
    )
    worker.stop()


def test_a_node_that_kills_its_whole_worker_stops_at_the_runs_limit(
    own_settings: Settings, own_workers: WorkerFactory
) -> None:
    # Under the solo pool the node kills the worker itself: the dead-worker rule
    # counts each death, and the limit (2 here, per run) spares the third worker.
    workers = [
        own_workers.start(f"solo{i}", tags="poison-b", celery_args=("--pool", "solo"))
        for i in range(3)
    ]
    plan = {
        "Remote": {"node_id": "rt_suicide", "target": {"Tag": "poison-b"}, "plan": ex("rt_suicide")}
    }
    started = time.monotonic()
    run = submit_plan(plan, input=1, settings=own_settings, require_workers=True, max_node_deaths=2)
    with pytest.raises(KilledWorkerError) as caught:
        run.wait(timeout=90)
    dead = [w for w in workers if w.proc.poll() is not None]
    assert len(dead) == 2, [w.worker_id for w in dead]
    message = str(caught.value)
    assert "died 2 times" in message
    assert all(w.worker_id in message for w in dead), message
    assert run.status().nodes["rt_suicide"].state == "failed"
    survivor = next(w for w in workers if w not in dead)
    assert survivor.worker_id in _live_ids(own_settings)
    print(f"solo: 2 worker deaths -> KilledWorker in {time.monotonic() - started:.1f} s")


def test_max_node_deaths_must_be_at_least_one(own_settings: Settings) -> None:
    with pytest.raises(PlanInputError, match="max_node_deaths"):
        submit_plan(ex("rt_add"), settings=own_settings, max_node_deaths=0)
    with pytest.raises(PlanInputError, match="deadline_s"):
        submit_plan(ex("rt_add"), settings=own_settings, deadline_s=-1)


def test_a_node_running_on_a_live_worker_with_no_task_behind_it_runs_again(
    settings: Settings,
    two_workers: tuple[WorkerProcess, WorkerProcess],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As after a Redis outage that made the task fail and be acknowledged: the node
    # is `running` on a live worker that holds no task for it.
    monkeypatch.setattr(CeleryDispatcher, "_send", lambda *args, **kwargs: None)
    monkeypatch.setattr(CeleryDispatcher, "_send_batch", lambda *args, **kwargs: None)
    run = submit_plan(
        seq(ex("rt_add"), ex("rt_double")), input=1, settings=settings, require_workers=True
    )
    monkeypatch.undo()
    state: RedisRunState = run._state
    status = _node_status(state, "rt_add")
    assert (
        state.mark_running(["rt_add"], status["worker"], status["block"], 0, status["task_id"])
        is not None
    )
    state.sent([(status["block"], 0)])
    started = time.monotonic()
    assert run.wait(timeout=60) == 4
    took = time.monotonic() - started
    assert took >= settings.heartbeat_ttl_s, took  # judged on reports, not at once
    print(f"orphan re-dispatched and run done in {took:.1f} s")


def _node_status(state: RedisRunState, node_id: str) -> dict[str, Any]:
    raw = state.client.hget(state.nodes, node_id)
    assert raw is not None
    return dict(json.loads(raw))


def test_a_run_past_its_deadline_fails_naming_what_was_unfinished(
    settings: Settings, two_workers: tuple[WorkerProcess, WorkerProcess]
) -> None:
    run = submit_plan(
        seq(ex("rt_sleep"), remote("gpu", ex("rt_add"))),
        input=1,
        params={"rt_sleep": {"s": 20}},
        settings=settings,
        require_workers=True,
        deadline_s=2,
    )
    started = time.monotonic()
    with pytest.raises(RunDeadlineError) as caught:
        run.wait(timeout=30)
    took = time.monotonic() - started
    message = str(caught.value)
    assert "passed its deadline of 2 s" in message
    assert "'rt_sleep' (running on worker" in message and "1 node(s) not started yet" in message
    assert took < 2 + 3 * settings.heartbeat_ttl_s, took
    assert run.status().state == "failed"
    # The hung node was stopped: its worker no longer holds its task.
    sleeping = _node_status(run._state, "rt_sleep")
    registry = Registry.from_settings(settings)

    def released() -> bool:
        held = registry.held_tasks([sleeping["worker"]])[sleeping["worker"]]
        return held is not None and sleeping["task_id"] not in held

    assert wait_for(released, 10)


def test_the_cli_takes_a_deadline(tmp_path: Path) -> None:
    plan = json.dumps(par(ex("rt_sleep"), ex("rt_add")))
    (tmp_path / "plan.json").write_text(plan)
    (tmp_path / "params.json").write_text(json.dumps({"rt_sleep": {"s": 0.3}}))
    result = CliRunner().invoke(
        main,
        [
            "run",
            str(tmp_path / "plan.json"),
            "--params",
            str(tmp_path / "params.json"),
            "--nodes",
            "testkit.nodes.run_nodes",
            "--deadline",
            "0.1",
        ],
    )
    assert result.exit_code != 0
    assert "passed its deadline of 0.1 s" in result.output, result.output


def test_a_local_run_past_its_deadline_fails_between_nodes() -> None:
    result = run_local(
        par(ex("rt_sleep"), ex("rt_add")), input=1, params={"rt_sleep": {"s": 0.3}}, deadline_s=0.1
    )
    assert result.status == "failed"
    assert result.error is not None and result.error["type"] == "RunDeadlineExceeded"
    assert "1 node(s) not started yet" in result.error["message"]


def test_a_run_that_outlasts_the_run_ttl_keeps_its_state(
    settings: Settings, two_workers: tuple[WorkerProcess, WorkerProcess]
) -> None:
    short = settings.model_copy(update={"run_ttl_s": 2})
    run = submit_plan(
        ex("rt_sleep"), input=7, params={"rt_sleep": {"s": 5}}, settings=short, require_workers=True
    )
    assert run.wait(timeout=30) == 7
    assert wait_for(lambda: run.status().state == "done", 1)


def test_a_node_running_when_its_worker_restarted_under_its_id_runs_again(
    own_settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The worker comes back before its heartbeat expires (a long TTL here), so the
    # dead-worker rule never fires: the old process's message is unacknowledged for
    # an hour, and only the orphan rule sees that nothing runs the node.
    slow = own_settings.model_copy(
        update={"key_prefix": f"{own_settings.key_prefix}-rs", "heartbeat_ttl_s": 6.0}
    )
    factory = WorkerFactory(slow, tmp_path_factory.mktemp("restart-workers"))
    try:
        first = factory.start("same", tags="restart")
        run = submit_plan(
            remote("restart", ex("rt_sleep")),
            input=5,
            params={"rt_sleep": {"s": 2}},
            settings=slow,
            require_workers=True,
        )
        assert wait_for(lambda: run.status().nodes["rt_sleep"].state == "running", 20)
        first.signal_group(signal.SIGKILL)
        first.proc.wait(5)
        killed = time.monotonic()
        again = factory.start("same", tags="restart")
        assert time.monotonic() - killed < slow.heartbeat_ttl_s, "restarted too late to test"
        with caplog.at_level(logging.WARNING, logger="somatize_tasks.runtime.recovery.reaper"):
            assert run.wait(timeout=60) == 5
        assert "orphaned: rt_sleep" in caplog.text + again.log()
        assert run.status().nodes["rt_sleep"].worker == again.worker_id
        print(f"restarted worker's orphan done {time.monotonic() - killed:.1f} s after the kill")
    finally:
        factory.close()


def test_nodes_queued_behind_a_busy_worker_are_not_taken_for_orphans(
    own_settings: Settings, own_workers: WorkerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    # One slot, held for longer than the orphan rule needs (two TTLs): the nodes
    # behind it wait reserved by the worker or in its queue, and must stay put.
    worker = own_workers.start("busy", tags="queue-c", concurrency=1)
    blocker = submit_plan(
        remote("queue-c", ex("rt_sleep")),
        input=0,
        params={"rt_sleep": {"s": 3 * own_settings.heartbeat_ttl_s}},
        settings=own_settings,
        require_workers=True,
    )
    assert wait_for(lambda: blocker.status().nodes["rt_sleep"].state == "running", 20)
    queued = [
        submit_plan(
            remote("queue-c", ex("rt_add")), input=i, settings=own_settings, require_workers=True
        )
        for i in range(4)
    ]
    with caplog.at_level(logging.WARNING, logger="somatize_tasks.runtime.recovery.reaper"):
        assert [run.wait(timeout=60) for run in queued] == [1, 2, 3, 4]
    assert blocker.wait(timeout=30) == 0
    assert "dispatched node(s)" not in caplog.text + worker.log(), caplog.text
