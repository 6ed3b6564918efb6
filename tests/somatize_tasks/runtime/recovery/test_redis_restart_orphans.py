"""Redis restarted with AOF while a node runs: the run still finishes.

With ``redis_retry_s=0`` the node's task does not wait the outage out
(``runtime.outage``): it fails, and its message stays unacknowledged until
the visibility timeout (an hour). The run's state comes back with Redis
(AOF), showing the node ``running`` on a worker that is alive again and
holds no task for it: the orphan rule runs it again. Its own redis-server
on a free port, never the shared one.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import redis

from somatize_tasks.config.settings import Settings
from somatize_tasks.runtime.producer.submit import submit_plan
from testkit.nodes import run_nodes  # noqa: F401
from testkit.plans import ex
from testkit.services import free_port, wait_for
from testkit.workers import WorkerFactory

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]


def _redis(port: int, data: Path) -> subprocess.Popen[bytes]:
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
            "yes",
            "--appendfsync",
            "always",
            "--dir",
            str(data),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port, socket_connect_timeout=0.2)

    def up() -> bool:
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False

    assert wait_for(up, 10), "redis-server did not start"
    return proc


def test_a_node_running_through_a_redis_restart_with_aof_finishes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port, data = free_port(), tmp_path / "redis"
    data.mkdir()
    server = _redis(port, data)
    settings = Settings(
        redis_url=f"redis://127.0.0.1:{port}/0",
        key_prefix="aof",
        heartbeat_interval_s=0.5,
        store_kind="local",
        store_dir=tmp_path / "store",
        cache_dir=tmp_path / "cache",
        worker_id="aof-producer",
        redis_retry_s=0,
    )
    factory = WorkerFactory(settings, tmp_path)
    try:
        worker = factory.start("solo", tags="cpu")
        run = submit_plan(
            ex("rt_sleep"),
            input=3,
            params={"rt_sleep": {"s": 1.5}},
            settings=settings,
            require_workers=True,
        )
        assert wait_for(lambda: run.status().nodes["rt_sleep"].state == "running", 20)
        server.kill()
        server.wait()
        time.sleep(10)  # longer than the client's retries: the node's task gives up
        server = _redis(port, data)
        restarted = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="somatize_tasks.runtime.recovery.reaper"):
            assert run.wait(timeout=60) == 3
        took = time.monotonic() - restarted
        assert "orphaned: rt_sleep" in caplog.text + worker.log()
        assert took < 30, took
        print(f"\nrun done {took:.1f} s after Redis came back, by the orphan rule")
    finally:
        factory.close()
        server.kill()
        server.wait()
