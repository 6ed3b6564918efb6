"""Replays on real workers: a copy of a genuine signed message runs nothing again.

What a broker writer can do without the key: push a captured message (taken here
from kombu's unacked index while its node runs) back on the queue, as it is, marked
``redelivered``, or with a header changed; publish a captured control command again.
None of it may re-run a node, count as a node death, or stop a worker.
"""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kombu import Producer
from pydantic import SecretStr
from redis import Redis

from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import RunStateTamperedError
from somatize_tasks.messaging.celery_app import create_app
from somatize_tasks.runtime.producer.handle import PlanRun
from somatize_tasks.runtime.producer.submit import submit_plan
from testkit.plans import ex, seq
from testkit.services import wait_for
from testkit.workers import WorkerFactory, WorkerProcess

pytestmark = pytest.mark.slow
KEY = "replay-test-key-" + "r" * 20


@pytest.fixture(scope="module")
def signed(settings: Settings) -> Iterator[Settings]:
    prefix = f"{settings.key_prefix}-rp"
    yield settings.model_copy(
        update={
            "key_prefix": prefix,
            "worker_id": f"{prefix}-producer",
            "fuse_chains": False,
            "message_key": SecretStr(KEY),
            "control_ttl_s": 30.0,
        }
    )
    client = Redis.from_url(settings.redis_url)
    for key in client.scan_iter(match=f"*{prefix}*", count=1000):
        client.delete(key)


@pytest.fixture(scope="module")
def factory(signed: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerFactory]:
    made = WorkerFactory(signed, tmp_path_factory.mktemp("replay-workers"))
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(scope="module")
def worker(factory: WorkerFactory) -> WorkerProcess:
    return factory.start("one", tags="cpu")


def _status(signed: Settings, run: PlanRun, node_id: str) -> dict[str, Any]:
    client = Redis.from_url(signed.redis_url)
    raw = client.hget(f"{signed.key_prefix}:run:{run.id}:nodes", node_id)
    return dict(json.loads(raw or b"{}"))


def _captured(signed: Settings, task_id: str) -> dict[str, Any]:
    """The envelope of a message a worker holds now (kombu's unacked index)."""
    client = Redis.from_url(signed.broker)
    for raw in client.hvals("unacked"):
        envelope, _exchange, _key = json.loads(raw)
        if envelope["headers"].get("id") == task_id:
            return dict(envelope)
    raise AssertionError(f"message {task_id} is not held by any worker")


def _push(signed: Settings, worker: WorkerProcess, envelope: dict[str, Any]) -> None:
    Redis.from_url(signed.broker).lpush(worker.queue, json.dumps(envelope))


def _refusals(worker: WorkerProcess, task_id: str) -> list[str]:
    return [line for line in worker.log().splitlines() if "refused" in line and task_id in line]


def _running(signed: Settings, run: PlanRun, node_id: str) -> dict[str, Any] | None:
    status = _status(signed, run, node_id)
    return status if status.get("state") == "running" else None


def test_a_node_message_replayed_during_its_run_runs_nothing_again(
    signed: Settings, worker: WorkerProcess
) -> None:
    """Replayed as is, and three times marked ``redelivered`` (which once counted as
    node deaths and failed a healthy run with KilledWorker): 0 re-executions."""
    for _ in range(2):
        run = submit_plan(
            seq(ex("fence_draw"), ex("fence_use")),
            params={"fence_draw": {"s": 2.5}},
            settings=signed,
            require_workers=True,
        )
        assert wait_for(lambda r=run: _running(signed, r, "fence_draw") is not None, 30)
        task_id = str(_status(signed, run, "fence_draw")["task_id"])
        envelope = _captured(signed, task_id)
        _push(signed, worker, envelope)
        redelivered = json.loads(json.dumps(envelope))
        redelivered["properties"]["delivery_info"]["redelivered"] = True
        for _ in range(3):
            _push(signed, worker, redelivered)
        output = run.wait(timeout=60)
        assert run.result("fence_draw") == output
        assert _status(signed, run, "fence_draw")["attempt"] == 1  # one execution only
        assert wait_for(lambda t=task_id: len(_refusals(worker, t)) >= 4, 10), worker.log()[-3000:]
        # After the run: a late copy runs nothing either (this worker took it and no
        # longer holds it, so it reaches the task, whose start refuses a finished run).
        _push(signed, worker, envelope)
        skipped = f"run {run.id}: ['fence_draw'] already done"
        assert wait_for(
            lambda t=task_id, s=skipped: len(_refusals(worker, t)) >= 5 or s in worker.log(), 10
        )
        assert _status(signed, run, "fence_draw")["attempt"] == 1
    assert "lost its worker process" not in worker.log()
    assert "KilledWorker" not in worker.log()


CHANGES = {
    "timelimit": [0.5, 0.5],
    "retries": 7,
    "eta": "2030-01-01T00:00:00+00:00",
    "expires": "2000-01-01T00:00:00+00:00",
    "somatize_message": {"id": "f" * 32, "exp": 4102444800.0},
}


def test_a_node_message_with_any_header_changed_is_refused(
    signed: Settings, worker: WorkerProcess
) -> None:
    run = submit_plan(
        seq(ex("fence_draw"), ex("fence_use")),
        params={"fence_draw": {"s": 2.5}},
        settings=signed,
        require_workers=True,
    )
    assert wait_for(lambda: _running(signed, run, "fence_draw") is not None, 30)
    task_id = str(_status(signed, run, "fence_draw")["task_id"])
    envelope = _captured(signed, task_id)
    for header, value in CHANGES.items():
        changed = json.loads(json.dumps(envelope))
        changed["headers"][header] = value
        _push(signed, worker, changed)
    output = run.wait(timeout=60)
    assert run.result("fence_draw") == output
    assert _status(signed, run, "fence_draw")["attempt"] == 1
    assert wait_for(lambda: len(_refusals(worker, task_id)) >= len(CHANGES), 10)
    assert all("bad signature" in line for line in _refusals(worker, task_id))


def test_a_replayed_shutdown_does_nothing(
    signed: Settings, factory: WorkerFactory, worker: WorkerProcess
) -> None:
    """A genuine signed ``shutdown`` stops its worker; the same command published
    again (captured on its way out) leaves the restarted worker running."""
    victim = factory.start("victim", tags="other")
    node = f"{victim.worker_id}@{socket.gethostname()}"
    sent: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    original = Producer.publish

    def capture(self: Producer, *args: Any, **kwargs: Any) -> Any:
        if isinstance(args[0], dict) and args[0].get("method") == "shutdown":
            sent.append((args, kwargs))
        return original(self, *args, **kwargs)

    app = create_app(signed)
    Producer.publish = capture  # type: ignore[method-assign]
    try:
        app.control.shutdown(destination=[node])
    finally:
        Producer.publish = original  # type: ignore[method-assign]
    assert len(sent) == 1
    assert victim.proc.wait(30) is not None  # the genuine command acted
    again = factory.start("victim", tags="other")
    with app.connection_for_write() as connection:
        producer = Producer(connection.default_channel)
        args, kwargs = sent[0]
        for _ in range(3):
            producer.publish(*args, **kwargs)
    time.sleep(3.0)
    assert again.proc.poll() is None, again.log()[-2000:]
    refused = [line for line in again.log().splitlines() if "refused control command" in line]
    assert len(refused) == 3 and all("shutdown" in line for line in refused), refused


def test_a_forged_value_written_into_the_run_state_is_never_returned(
    signed: Settings, worker: WorkerProcess
) -> None:
    """A Redis writer without the key sets the run's output and a node's latest value
    to values of its choosing (inline refs and literals): refused, never returned."""
    run = submit_plan(
        seq(ex("fence_draw"), ex("fence_use")),
        params={"fence_draw": {"s": 0.5}},
        settings=signed,
        require_workers=True,
    )
    genuine = run.wait(timeout=60)
    client = Redis.from_url(signed.redis_url)
    meta = f"{signed.key_prefix}:run:{run.id}"
    forged_ref = {
        "ref": {
            "run_id": run.id,
            "node_id": "fence_use",
            "codec": "json",
            "size": 8,
            "inline": base64.b64encode(b'"FORGED"').decode(),
        }
    }
    for forged in (forged_ref, {"value": "FORGED"}, {**forged_ref, "mac": "0" * 32}):
        client.hset(meta, "output", json.dumps(forged))
        client.hset(f"{meta}:latest", "fence_draw", json.dumps(forged))
        fresh = PlanRun.attach(run.id, signed)
        with pytest.raises(RunStateTamperedError, match="output"):
            fresh.wait(timeout=10)
        with pytest.raises(RunStateTamperedError, match="latest:fence_draw"):
            fresh.result("fence_draw")
    assert genuine != "FORGED"
