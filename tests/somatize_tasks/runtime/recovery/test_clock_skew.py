"""One clock: workers and reapers whose wall clocks are two hours off judge time right.

Real worker processes run with ``time.time()`` shifted (:mod:`testkit.skew`): one
two hours behind, one two hours ahead, and a standalone ``somatize-tasks reaper``
beside each, equally off; the workers stand for election as the cluster's reaper
too. Before, the worker behind stamped ``started_at`` two hours in the past and a
reaper ahead failed its 3 s node with ``NodeTimeLimitExceeded ... 600 s``, and a
reaper ahead failed healthy runs with ``RunDeadlineError``. Every run must now
end right; and a run that hangs must still end by its deadline when the only
reapers left are two hours behind (on their clocks it would be alive for hours).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from redis import Redis

from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import RunDeadlineError
from somatize_tasks.runtime.producer.submit import submit_plan
from testkit.plans import ex, remote, seq
from testkit.services import wait_for
from testkit.skew import skewed_env
from testkit.workers import REPO, WorkerFactory, WorkerProcess

pytestmark = pytest.mark.slow

SHIFT_S = 2 * 3600.0
#: Runs judged by the skewed reapers (the issue's bar).
RUNS = int(os.environ.get("SKEW_RUNS", "20"))


@dataclass
class Skewed:
    settings: Settings
    workers: dict[str, WorkerProcess]
    reapers: dict[str, subprocess.Popen[bytes]]
    root: Path


def _start_reaper(settings: Settings, shift_s: float, root: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, **settings.to_env(), **skewed_env(shift_s, root)}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env["PYTHONPATH"]])
    log = (root / f"reaper{shift_s:+.0f}.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-c", "from somatize_tasks.cli import main; main()", "reaper"],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


@pytest.fixture(scope="module")
def skewed(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Skewed]:
    root = tmp_path_factory.mktemp("skew")
    own = settings.model_copy(
        update={"key_prefix": f"{settings.key_prefix}-skew", "node_time_limit_s": 600.0}
    )
    factory = WorkerFactory(own, root)
    reapers: dict[str, subprocess.Popen[bytes]] = {}
    try:
        workers = {
            side: factory.start(side, tags=f"skew-{side}", extra_env=skewed_env(shift, root))
            for side, shift in (("behind", -SHIFT_S), ("ahead", SHIFT_S))
        }
        reapers = {
            side: _start_reaper(own, shift, root)
            for side, shift in (("behind", -SHIFT_S), ("ahead", SHIFT_S))
        }
        yield Skewed(own, workers, reapers, root)
    finally:
        for proc in reapers.values():
            _stop(proc)
        factory.close()
        client = Redis.from_url(own.redis_url)
        for key in client.scan_iter(match=f"{own.key_prefix}*", count=1000):
            client.delete(key)


def test_the_shim_puts_a_worker_two_hours_off(skewed: Skewed) -> None:
    """The test can fail: the worker processes really live on shifted clocks."""
    probe = subprocess.run(
        [sys.executable, "-c", "import time; print(time.time())"],
        env={**os.environ, **skewed_env(-SHIFT_S, skewed.root)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert abs(float(probe.stdout) - (time.time() - SHIFT_S)) < 60


def test_skewed_workers_and_reapers_fail_no_healthy_run(skewed: Skewed) -> None:
    plan = seq(remote("skew-behind", ex("rt_sleep")), remote("skew-ahead", ex("rt_sleep_2")))
    runs = [
        submit_plan(
            plan,
            input=index,
            params={"rt_sleep": {"s": 1.0}, "rt_sleep_2": {"s": 1.0}},
            ops={"rt_sleep_2": "rt_sleep"},
            settings=skewed.settings,
            require_workers=True,
            deadline_s=120,
        )
        for index in range(RUNS)
    ]
    outcomes = []
    for index, run in enumerate(runs):
        try:
            outcomes.append(run.wait(timeout=180) == index)
        except Exception as exc:  # a false time limit or deadline: the bug
            outcomes.append(f"{type(exc).__name__}: {exc}")
    wrong = [o for o in outcomes if o is not True]
    assert not wrong, f"{len(wrong)} of {RUNS} runs failed: {wrong[:3]}"
    for proc in skewed.reapers.values():
        assert proc.poll() is None, "a skewed reaper exited"


def test_a_hung_run_still_ends_by_its_deadline_under_reapers_two_hours_behind(
    skewed: Skewed,
) -> None:
    _stop(skewed.reapers["ahead"])
    skewed.workers["ahead"].stop()
    run = submit_plan(
        remote("skew-behind", ex("rt_sleep")),
        input=1,
        params={"rt_sleep": {"s": 60.0}},
        settings=skewed.settings,
        require_workers=True,
        deadline_s=3,
    )
    client = Redis.from_url(skewed.settings.redis_url)
    meta = f"{skewed.settings.key_prefix}:run:{run.id}"
    started = time.monotonic()
    # Nobody else watches: no wait() here, whose own reaper is on a right clock.
    assert wait_for(lambda: client.hget(meta, "status") == b"failed", 60, 0.2), (
        "the run outlived its deadline under reapers two hours behind"
    )
    took = time.monotonic() - started
    error = json.loads(client.hget(meta, "error") or b"{}")
    assert error.get("type") == "RunDeadlineExceeded", error
    with pytest.raises(RunDeadlineError):
        run.wait(timeout=10)
    assert took < 30, f"ended {took:.1f} s after submission, deadline 3 s"
