"""One process per worker id, with real worker processes.

A second worker started under a live worker's id exits with one line naming the id
and what to do; a worker restarted under its id after a crash starts (its
predecessor's heartbeat is fresh but no longer renewed); and two that run anyway
(one paused past its heartbeat while a second took the id, then resumed) are caught:
both log a warning and ``somatize-tasks workers`` marks the id.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from redis import Redis

from somatize_tasks.cli import main
from somatize_tasks.config.settings import Settings
from somatize_tasks.workers.identity import recent_clashes
from somatize_tasks.workers.registry import Registry
from testkit.services import wait_for
from testkit.workers import WorkerFactory

pytestmark = pytest.mark.slow


@pytest.fixture
def factory(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[WorkerFactory]:
    own = settings.model_copy(
        update={"key_prefix": f"{settings.key_prefix}-dup{request.node.name[-6:]}"}
    )
    made = WorkerFactory(own, tmp_path_factory.mktemp("dup"))
    try:
        yield made
    finally:
        made.close()
        client = Redis.from_url(own.redis_url)
        for key in client.scan_iter(match=f"{own.key_prefix}*", count=1000):
            client.delete(key)


def _live(settings: Settings) -> set[str]:
    return {seen.info.id for seen in Registry.from_settings(settings).live()}


def test_a_second_worker_under_a_live_id_exits_with_one_clear_line(
    factory: WorkerFactory,
) -> None:
    first = factory.start("same")
    second = factory.start("same", wait=False, log_name="same-second")
    assert second.proc.wait(60) != 0, second.log()
    text = second.log()
    errors = [line for line in text.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, text
    assert f"worker id '{first.worker_id}' is already used by a live worker" in errors[0]
    assert "--worker-id" in errors[0] and "SOMATIZE_WORKER_ID" in errors[0]
    assert "Traceback" not in text, text
    assert first.proc.poll() is None and first.worker_id in _live(factory.settings)
    assert "worker id" not in first.log().split("ready.", 1)[-1], "the first one was warned"


def test_a_worker_restarted_under_its_id_after_a_crash_starts(factory: WorkerFactory) -> None:
    first = factory.start("again")
    first.signal_group(signal.SIGKILL)
    first.proc.wait(5)
    killed = time.monotonic()
    again = factory.start("again")  # waits for its heartbeat: it started
    took = time.monotonic() - killed
    assert again.proc.poll() is None
    # Before its predecessor's heartbeat expired is not required (a busy machine), but
    # the check must not wait for much more than it.
    assert took < 30, f"restart took {took:.1f} s"


def test_two_live_processes_under_one_id_are_caught(factory: WorkerFactory) -> None:
    settings = factory.settings
    first = factory.start("twin")
    first.signal_group(signal.SIGSTOP)  # a long pause: a second one takes the id over
    try:
        second = factory.start("twin", log_name="twin-second")
    finally:
        first.signal_group(signal.SIGCONT)
    registry = Registry.from_settings(settings)
    assert wait_for(lambda: first.worker_id in recent_clashes(registry, [first.worker_id]), 20)
    # Neither twin's report of the tasks it holds is believed (it would hide the other's).
    reports = []
    for _ in range(10):
        reports.append(registry.held_tasks([first.worker_id])[first.worker_id])
        time.sleep(0.2)
    assert reports == [None] * 10, reports
    warned = "is used by two live processes"
    assert wait_for(lambda: warned in first.log() and warned in second.log(), 20), (
        first.log()[-2000:],
        second.log()[-2000:],
    )
    env = {**settings.to_env(), "COLUMNS": "300"}  # rich: one line per row
    shown = CliRunner().invoke(main, ["workers"], env=env)
    assert shown.exit_code == 0, shown.output
    assert f"{first.worker_id} (DUPLICATE)" in shown.output, shown.output
    assert "two live processes heartbeat under it" in shown.output, shown.output
