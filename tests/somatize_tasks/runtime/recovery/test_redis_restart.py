"""Redis restarts (with its append-only file) while workers are busy: nothing is lost.

The workers use a redis-server of their own on a free port, never the shared
one. Nodes sleep through the outage and finish while Redis is still down, so
recording their results fails with ``ConnectionError`` (the task must wait
and do it again, not be acknowledged with its node left ``running``), and
their messages are acknowledged on a channel that closed meanwhile (kombu's
ack path must not take the worker down).
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from somatize_tasks.config.settings import Settings
from somatize_tasks.runtime.producer.handle import PlanRun
from somatize_tasks.runtime.producer.submit import submit_plan
from somatize_tasks.workers.registry import Registry
from testkit.nodes import run_nodes  # noqa: F401
from testkit.plans import ex, par, remote
from testkit.services import wait_for
from testkit.workers import WorkerFactory
from tests.conftest import OwnRedis

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]


def _waiting(run: PlanRun) -> dict[str, Any]:
    """``run.wait`` in a thread of its own: its value or error lands in the dict."""
    waited: dict[str, Any] = {}

    def wait() -> None:
        try:
            waited["value"] = run.wait(timeout=40)
        except Exception as exc:  # judged by the test
            waited["error"] = exc

    waited["thread"] = threading.Thread(target=wait, daemon=True)
    waited["thread"].start()
    return waited


def test_redis_restarted_while_nodes_run_every_run_finishes_and_every_worker_stays(
    own_redis: OwnRedis, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="somatize_tasks.runtime.recovery.reaper")
    settings = Settings(
        redis_url=own_redis.url,
        key_prefix="aof",
        heartbeat_interval_s=0.5,
        store_kind="local",
        store_dir=tmp_path / "store",
        cache_dir=tmp_path / "cache",
        worker_id="aof-producer",
        redis_retry_s=30.0,
    )
    factory = WorkerFactory(settings, tmp_path)
    try:
        workers = [factory.start(name, tags=f"cpu,w{name}", wait=False) for name in ("a", "b")]
        for worker in workers:
            factory.wait_live(worker)
        runs = {
            value: submit_plan(
                remote(tag, ex("rt_sleep")),
                input=value,
                params={"rt_sleep": {"s": 1.5}},
                settings=settings,
                require_workers=True,
            )
            for value, tag in ((1, "wa"), (2, "wb"))
        }
        # Free to go anywhere: a watcher that took the workers for dead when Redis
        # came back (their heartbeats expired meanwhile) would move these nodes.
        spread = submit_plan(
            par(ex("rt_sleep"), ex("rt_sleep_2")),
            input=3,
            params={"rt_sleep": {"s": 4}, "rt_sleep_2": {"s": 4}},
            settings=settings,
            require_workers=True,
        )
        # The producer waits across the outage: wait() rides it out, as tasks do.
        expected = {1: 1, 2: 2, 3: {"rt_sleep": 3, "rt_sleep_2": 3}}
        waits = {value: _waiting(run) for value, run in [*runs.items(), (3, spread)]}
        time.sleep(0.6)  # every node is sleeping now
        own_redis.stop()
        time.sleep(2.5)  # the nodes end while Redis is down
        own_redis.start()
        for value, waited in waits.items():
            waited["thread"].join(45)
            assert waited.get("value") == expected[value], waited
        registry = Registry.from_settings(settings)
        live = lambda: {w.info.id for w in registry.live()} == {w.worker_id for w in workers}  # noqa: E731
        assert wait_for(live, 20), [w.log()[-2000:] for w in workers]
        # Each worker runs a node after (its consumer reconnected, its old acks handled).
        after = submit_plan(
            par(remote("wa", ex("rt_add")), remote("wb", ex("rt_double"))),
            input=2,
            settings=settings,
            require_workers=True,
        )
        assert after.wait(timeout=30) == {"rt_add": 3, "rt_double": 4}
        time.sleep(1.0)
        logs = "\n".join(worker.log() for worker in workers)
        assert all(worker.proc.poll() is None for worker in workers), logs[-4000:]
        assert "Unrecoverable error" not in logs
        assert "lost Redis" in logs and "Redis is back; retrying" in logs
        taken_for_dead = "dead worker" in logs + caplog.text
        assert not taken_for_dead, "a live worker was taken for dead after the restart"
    finally:
        factory.close()
