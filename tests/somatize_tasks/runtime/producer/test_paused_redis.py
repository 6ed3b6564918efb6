"""A paused Redis at submit: wait within ``SOMATIZE_REDIS_RETRY_S``, then one line.

A ``redis-server`` of the test's own is SIGSTOPped (a VM freeze, a long fork, a
debugger): the kernel still accepts connections, so nothing is refused and every
read just waits. Before, ``submit`` failed after 5 s with a bare ``TimeoutError:
Timeout reading from socket`` (a connection already open hung for good).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import RunError
from somatize_tasks.runtime.producer.submit import submit_plan
from testkit.nodes import run_nodes  # noqa: F401  # rt_add, for the run done here
from testkit.plans import ex
from testkit.services import start_redis_server
from testkit.workers import REPO

BUDGET_S = 3.0


@pytest.fixture
def paused(tmp_path: Path) -> Iterator[tuple[Settings, subprocess.Popen[bytes]]]:
    proc, port = start_redis_server()
    settings = Settings(
        redis_url=f"redis://127.0.0.1:{port}/0",
        key_prefix="paused",
        store_kind="local",
        store_dir=tmp_path / "store",
        cache_dir=tmp_path / "cache",
        ram_max_bytes=0,
        redis_retry_s=BUDGET_S,
        worker_id="paused-producer",
    )
    try:
        yield settings, proc
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait()


def test_submit_to_a_paused_redis_fails_with_one_line_after_the_budget(
    paused: tuple[Settings, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    settings, proc = paused
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(ex("rt_add")))
    os.kill(proc.pid, signal.SIGSTOP)  # for longer than the budget: until the end
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "somatize_tasks", "submit", str(plan)],
        cwd=REPO,
        env={**os.environ, **settings.to_env()},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    took = time.monotonic() - started
    assert done.returncode == 1, done
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    line = done.stderr.strip()
    assert line.startswith(f"Error: cannot reach Redis at {settings.redis_url}"), line
    assert f"no answer for {BUDGET_S:g} s" in line and "paused" in line, line
    assert BUDGET_S <= took < BUDGET_S + 20, f"failed after {took:.1f} s"


def test_submit_waits_for_a_redis_that_comes_back_within_the_budget(
    paused: tuple[Settings, subprocess.Popen[bytes]],
) -> None:
    settings, proc = paused
    settings = settings.model_copy(update={"redis_retry_s": 30.0})
    submit_plan(ex("rt_add"), input=1, settings=settings)  # a connection opened before
    os.kill(proc.pid, signal.SIGSTOP)
    threading.Timer(2.0, os.kill, (proc.pid, signal.SIGCONT)).start()
    started = time.monotonic()
    run = submit_plan(ex("rt_add"), input=1, settings=settings)  # no worker: runs here
    assert time.monotonic() - started >= 1.5
    assert run.wait(timeout=10) == 2


def test_the_python_api_raises_the_same_one_line_error(
    paused: tuple[Settings, subprocess.Popen[bytes]],
) -> None:
    settings, proc = paused
    os.kill(proc.pid, signal.SIGSTOP)
    with pytest.raises(RunError) as caught:
        submit_plan(ex("rt_add"), input=1, settings=settings)
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith(f"cannot reach Redis at {settings.redis_url}")
