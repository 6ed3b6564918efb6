"""Outputs outlive their worker, and reading one honours the caller's timeout.

Real workers with S3 (moto) and no shared directory, so a value not in S3
really lives only in its worker's cache. Each test kills or blocks workers
of its own, under a key prefix of its own.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import pytest
from redis import Redis

from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import OutputUnavailableError
from somatize_tasks.runtime.producer.submit import submit_plan
from testkit.nodes import run_nodes
from testkit.plans import ex, remote, seq
from testkit.services import wait_for
from testkit.workers import WorkerFactory

pytestmark = pytest.mark.slow
MADE = run_nodes.make()  # rt_make's output: several KB, so it goes through the store


@pytest.fixture(scope="module")
def out_settings(settings: Settings) -> Iterator[Settings]:
    assert settings.store_kind == "s3"
    prefix = f"{settings.key_prefix}-out"
    yield settings.model_copy(update={"key_prefix": prefix})
    client = Redis.from_url(settings.redis_url)
    for key in client.scan_iter(match=f"{prefix}*", count=1000):
        client.delete(key)


@pytest.fixture(scope="module")
def out_workers(
    out_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerFactory]:
    factory = WorkerFactory(out_settings, tmp_path_factory.mktemp("out-workers"))
    try:
        yield factory
    finally:
        factory.close()


def test_the_final_output_is_read_after_its_worker_died(
    out_settings: Settings, out_workers: WorkerFactory
) -> None:
    holder = out_workers.start("final", tags="out-final")
    run = submit_plan(
        remote("out-final", ex("rt_make")), settings=out_settings, require_workers=True
    )
    # Not wait(): reading the output would have the holder upload it first.
    assert wait_for(lambda: run.status().state == "done", 30)
    holder.signal_group(signal.SIGKILL)
    holder.proc.wait(5)
    started = time.monotonic()
    assert run.result("rt_make", timeout=5) == MADE
    assert run.wait(timeout=5) == MADE
    assert time.monotonic() - started < 5


def test_an_intermediate_output_of_a_dead_worker_fails_clearly_within_the_timeout(
    out_settings: Settings, out_workers: WorkerFactory
) -> None:
    holder = out_workers.start("middle", tags="out-middle")
    run = submit_plan(
        remote("out-middle", seq(ex("rt_make"), ex("rt_sum"))),
        settings=out_settings,
        require_workers=True,
    )
    assert run.wait(timeout=30) == sum(MADE)
    holder.signal_group(signal.SIGKILL)
    holder.proc.wait(5)
    started = time.monotonic()
    with pytest.raises(OutputUnavailableError) as caught:
        run.result("rt_make", timeout=10)
    took = time.monotonic() - started
    assert caught.value.node_id == "rt_make" and caught.value.worker_id == holder.worker_id
    assert "which is gone" in str(caught.value)
    assert took < out_settings.heartbeat_ttl_s + 3, took  # not the whole timeout


def test_a_busy_holder_is_given_up_on_at_the_callers_timeout(
    out_settings: Settings, out_workers: WorkerFactory
) -> None:
    holder = out_workers.start("busy", tags="out-busy", concurrency=1)
    run = submit_plan(
        remote("out-busy", seq(ex("rt_make"), ex("rt_sum"))),
        settings=out_settings,
        require_workers=True,
    )
    assert run.wait(timeout=30) == sum(MADE)
    blocker = submit_plan(
        remote("out-busy", ex("rt_sleep")),
        input=1,
        params={"rt_sleep": {"s": 8}},
        settings=out_settings,
        require_workers=True,
    )
    assert _wait_running(blocker)
    started = time.monotonic()
    with pytest.raises(OutputUnavailableError) as caught:
        run.result("rt_make", timeout=2)
    took = time.monotonic() - started
    assert 2 <= took < 3.5, took
    assert caught.value.worker_id == holder.worker_id and "in time" in str(caught.value)
    assert blocker.wait(timeout=30) == 1
    assert run.result("rt_make", timeout=10) == MADE  # free again: it hands the value over


def _wait_running(run: object) -> bool:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if run.status().nodes["rt_sleep"].state == "running":  # type: ignore[attr-defined]
            return True
        time.sleep(0.1)
    return False
