"""Runs on real worker processes: values cross workers through the store (moto S3).

The session's ``two_workers`` are a ``gpu,training`` worker and a ``cpu``
worker; the settings inline values up to 1 KiB only, so ``rt_make``'s list
must travel through S3.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import NodeFailedError, NoWorkersError, RunCancelledError
from somatize_tasks.runtime.producer.handle import PlanRun
from somatize_tasks.runtime.producer.submit import submit_plan
from somatize_tasks.runtime.producer.trials import submit_study
from somatize_tasks.workers.registry import Registry
from testkit.nodes import run_nodes  # noqa: F401  (the local fallback needs the catalog here)
from testkit.plans import (
    BRANCH,
    COMPOSITE,
    FORK_JOIN,
    FORK_JOIN_OPS,
    FORK_JOIN_OUTPUT,
    LOOP,
    STEP,
    STREAM,
    ex,
    par,
    remote,
    seq,
)
from testkit.services import wait_for
from testkit.workers import REPO, WorkerProcess, wait_idle

pytestmark = pytest.mark.slow
Workers = tuple[WorkerProcess, WorkerProcess]


def test_fork_join_branches_run_on_different_workers_and_values_cross_through_s3(
    settings: Settings, two_workers: Workers
) -> None:
    gpu, cpu = two_workers
    wait_idle(settings)  # placement spreads the branches over free slots
    run = submit_plan(FORK_JOIN, ops=FORK_JOIN_OPS, settings=settings, require_workers=True)
    assert run.wait(timeout=60) == FORK_JOIN_OUTPUT
    status = run.status()
    assert status.state == "done"
    assert {status.nodes[n].worker for n in ("rt_scale", "rt_sum")} == {gpu.worker_id}
    assert {status.nodes[n].worker for n in ("rt_make", "rt_sum_2", "rt_join")} == {cpu.worker_id}
    crossed = [
        t for t in status.transfers if t["from_node"] == "rt_make" and t["to_node"] == "rt_scale"
    ]
    assert crossed and crossed[0]["transfer_type"] == "s3"
    assert crossed[0]["from_worker"] == cpu.worker_id and crossed[0]["to_worker"] == gpu.worker_id
    assert run.progress().done == run.progress().total == 5


@pytest.mark.parametrize(
    ("plan", "given", "expected"),
    [
        (ex("rt_add"), 1, 2),
        (seq(ex("rt_add"), ex("rt_double")), 4, 10),
        (par(ex("rt_add"), remote("gpu", ex("rt_double"))), 3, {"rt_add": 4, "rt_double": 6}),
        (LOOP, 0, 5),
        (BRANCH, 20, 40),
        (BRANCH, 3, -3),
        (STEP, 5, 10),
        (STREAM, [1, 2, 3, 4, 5], [6, 8, 10, 12, 12]),
        (COMPOSITE, [1.0, 2.0, 3.0], [-2.0, 0.0, 2.0]),
        (seq("Empty", ex("rt_add")), 1, 2),
    ],
    ids=[
        "execute",
        "sequence",
        "parallel-remote",
        "loop",
        "branch-big",
        "branch-small",
        "step",
        "stream",
        "composite",
        "empty",
    ],
)
def test_every_variant_computes_on_real_workers(
    settings: Settings, two_workers: Workers, plan: Any, given: Any, expected: Any
) -> None:
    run = submit_plan(plan, input=given, settings=settings, require_workers=True)
    assert run.wait(timeout=60) == expected


def test_a_node_that_raises_names_itself_its_worker_and_the_remote_traceback(
    settings: Settings, two_workers: Workers
) -> None:
    run = submit_plan(
        seq(ex("rt_add"), ex("rt_fail"), ex("rt_double")),
        input=1,
        settings=settings,
        require_workers=True,
    )
    with pytest.raises(NodeFailedError) as caught:
        run.wait(timeout=60)
    error = caught.value
    assert error.node_id == "rt_fail"
    assert error.worker_id in {w.worker_id for w in two_workers}
    assert "rt_fail failed on purpose" in error.remote_traceback
    status = run.status()
    assert status.nodes["rt_fail"].state == "failed"
    # The three run as one fused chain, reported as if unfused: what ran before the
    # failure is done, what follows it never ran (pending, as it would be unfused).
    assert status.nodes["rt_add"].state == "done"
    assert status.nodes["rt_double"].state == "pending"


def test_cancel_mid_run_stops_the_run_and_starts_nothing_new(
    settings: Settings, two_workers: Workers
) -> None:
    run = submit_plan(
        seq(ex("rt_sleep"), ex("rt_add")),
        input=1,
        params={"rt_sleep": {"s": 5}},
        settings=settings.model_copy(update={"fuse_chains": False}),  # two tasks, not one
        require_workers=True,
    )
    assert wait_for(lambda: run.status().nodes["rt_sleep"].state == "running", 20)
    assert run.cancel()
    with pytest.raises(RunCancelledError):
        run.wait(timeout=10)
    time.sleep(1.0)
    status = run.status()
    assert status.state == "cancelled"
    assert status.nodes["rt_add"].state == "cancelled"
    # Nothing new started: rt_add was never even queued (the status shows the raw state).
    assert run._context.redis.hget(run._state.nodes, "rt_add") is None
    assert not run.cancel()


def test_a_plan_submitted_while_one_worker_is_full_goes_to_the_other(
    settings: Settings, two_workers: Workers
) -> None:
    gpu, cpu = two_workers
    busy = submit_plan(
        par(remote("gpu", ex("rt_sleep")), remote("gpu", ex("rt_sleep_2"))),
        input=0,
        params={"rt_sleep": {"s": 4}, "rt_sleep_2": {"s": 4}},
        settings=settings,
        require_workers=True,
    )
    registry = Registry.from_settings(settings)

    def gpu_full() -> bool:
        return any(w.info.id == gpu.worker_id and not w.info.has_capacity for w in registry.live())

    assert wait_for(gpu_full, 20), "the gpu worker never reported itself full"
    run = submit_plan(
        seq(ex("rt_add"), par(ex("rt_double"), ex("rt_negate"))),
        input=1,
        settings=settings,
        require_workers=True,
    )
    assert {a.worker_id for a in run.distribution.assignments} == {cpu.worker_id}
    assert run.wait(timeout=30) == {"rt_double": 4, "rt_negate": -2}
    assert busy.wait(timeout=30) == {"rt_sleep": 0, "rt_sleep_2": 0}


def test_two_runs_at_once_share_the_workers(settings: Settings, two_workers: Workers) -> None:
    results: list[Any] = []

    def submit_and_wait() -> None:
        try:
            run = submit_plan(FORK_JOIN, ops=FORK_JOIN_OPS, settings=settings, require_workers=True)
            results.append(run.wait(timeout=60))
        except Exception as exc:  # reported by the assertion below
            results.append(repr(exc))

    threads = [threading.Thread(target=submit_and_wait) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    assert results == [FORK_JOIN_OUTPUT, FORK_JOIN_OUTPUT]


def test_attach_from_a_second_process_follows_the_same_run(
    settings: Settings, two_workers: Workers
) -> None:
    run = submit_plan(
        seq(ex("rt_sleep"), ex("rt_make"), ex("rt_sum")),
        params={"rt_sleep": {"s": 1}},
        settings=settings,
        require_workers=True,
    )
    script = (
        "import json, sys\n"
        "from somatize_tasks.runtime.producer.handle import PlanRun\n"
        "run = PlanRun.attach(sys.argv[1])\n"
        "output = run.wait(timeout=60)\n"
        "progress = list(vars(run.progress()).values())\n"
        "print(json.dumps({'output': output, 'progress': progress}))\n"
    )
    env = {**settings.to_env(), "PYTHONPATH": str(REPO)}
    done = subprocess.run(  # noqa: PLW1510 - the return code is asserted below
        [sys.executable, "-c", script, run.id],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"output": run.wait(timeout=5), "progress": [3, 3]}


def test_result_reads_one_nodes_output_even_from_another_workers_cache(
    settings: Settings, two_workers: Workers
) -> None:
    run = submit_plan(FORK_JOIN, ops=FORK_JOIN_OPS, settings=settings, require_workers=True)
    run.wait(timeout=60)
    assert run.result("rt_scale") == [v * 2 for v in [i * 0.5 for i in range(400)]]


def test_no_live_worker_runs_locally_with_a_warning_unless_workers_are_required(
    settings: Settings,
) -> None:
    lonely = settings.model_copy(update={"key_prefix": settings.key_prefix + "-empty"})
    with pytest.warns(RuntimeWarning, match="No workers available"):
        run = submit_plan(seq(ex("rt_add"), ex("rt_double")), input=1, settings=lonely)
    assert run.wait() == 4
    with pytest.raises(NoWorkersError, match="Start a worker"):
        submit_plan(ex("rt_add"), settings=lonely, require_workers=True)
    assert PlanRun  # the fallback returns the same handle type


def test_a_study_runs_one_trial_per_entry_round_robin_across_workers(
    settings: Settings, two_workers: Workers
) -> None:
    trials = [{"rt_add": {"k": float(k)}} for k in (1, 2, 3, 4)]
    study = submit_study(
        seq(ex("rt_add"), ex("rt_double")), trials=trials, input=10, settings=settings
    )
    assert study.wait(timeout=60) == [22.0, 24.0, 26.0, 28.0]
    placed = [run.distribution.assignments[0].worker_id for run in study.runs]
    assert placed[0] != placed[1] and placed[0] == placed[2] and placed[1] == placed[3]
    assert {a.phase.kind for run in study.runs for a in run.distribution.assignments} == {"trial"}


def test_a_large_input_travels_through_the_store_not_inside_messages(
    settings: Settings, two_workers: Workers
) -> None:
    run = submit_plan(
        ex("rt_size"), input=list(range(50_000)), settings=settings, require_workers=True
    )
    assert run.wait(timeout=60) == 50_000
    recorded = json.loads(run._context.redis.hget(run._state.meta, "input") or b"{}")
    assert recorded["ref"]["inline"] is None and recorded["ref"]["size"] > settings.inline_max_bytes


def test_a_plan_submitted_while_every_worker_is_full_queues_instead_of_running_here(
    settings: Settings, two_workers: Workers
) -> None:
    registry = Registry.from_settings(settings)
    assert wait_for(lambda: all(w.info.active_jobs == 0 for w in registry.live()), 20)
    sleepers = [f"rt_sleep_{i}" for i in range(2, 8)]  # more than the 4 slots there are
    busy = submit_plan(
        par(*[ex(n) for n in sleepers]),
        input=0,
        params={n: {"s": 4} for n in sleepers},
        settings=settings,
        require_workers=True,
    )
    full = wait_for(lambda: all(not w.info.has_capacity for w in registry.live()), 20)
    assert full, (
        [(w.info.id, w.info.active_jobs, w.info.max_concurrent) for w in registry.live()],
        busy.status(),
        busy.distribution.warnings,
    )
    run = submit_plan(seq(ex("rt_add"), ex("rt_double")), input=1, settings=settings)
    assert run.distribution.assignments, "a busy cluster must queue, not run in the producer"
    assert any("Queued on the busy workers" in w for w in run.distribution.warnings)
    assert run.wait(timeout=60) == 4
    busy.wait(timeout=60)
