"""Studies on real workers: sampling finds a known minimum, pruning stops trials early,
a study killed halfway resumes without running any trial twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from somatize_tasks.config.settings import Settings
from somatize_tasks.runtime.producer.handle import PlanRun
from somatize_tasks.study.api import submit_study
from somatize_tasks.study.record import StudyRecord
from testkit.nodes.cache_nodes import runs
from testkit.nodes.study_nodes import QUAD_MINIMUM
from testkit.plans import ex
from testkit.services import wait_for
from testkit.workers import REPO, WorkerProcess, wait_idle

pytestmark = pytest.mark.slow
Workers = tuple[WorkerProcess, WorkerProcess]
SPACE = [
    {"type": "float", "name": "st_quad.a", "low": -3.0, "high": 3.0},
    {"type": "float", "name": "st_quad.b", "low": -3.0, "high": 3.0},
]


def overlapping_on_every_worker(trials: list[dict[str, Any]], workers: set[str]) -> bool:
    """Some moment when trials ran on every one of ``workers`` at once."""
    for trial in trials:
        at = trial["started_at"] + 0.05
        busy = {t["worker"] for t in trials if t["started_at"] <= at <= (t["finished_at"] or at)}
        if workers <= busy:
            return True
    return False


def test_a_bayesian_study_finds_the_minimum_running_trials_on_every_worker(
    settings: Settings, two_workers: Workers, tmp_path: Path
) -> None:
    wait_idle(settings)
    study = submit_study(
        ex("st_quad"),
        space=SPACE,
        n_trials=40,
        objective="st_quad",
        direction="minimize",
        strategy="bayesian",
        seed=5,
        startup_trials=5,  # 0 of 60 seeds missed by 10 %, asking 4 at a time (10: 1 of 40)
        record=tmp_path / "quad.json",
        settings=settings,
    )
    best = study.wait(timeout=240)
    assert best is not None
    assert best["value"] <= QUAD_MINIMUM * 1.10, best
    trials = study.trials
    assert len(trials) == 40 and all(t["state"] == "completed" for t in trials)
    assert study.progress == 1.0
    workers = {w.worker_id for w in two_workers}
    assert {t["worker"] for t in trials} == workers
    assert overlapping_on_every_worker(trials, workers)
    kept = StudyRecord.load(tmp_path / "quad.json")
    assert kept.best() is not None and kept.best().number == best["number"]  # type: ignore[union-attr]


def test_the_median_pruner_stops_a_quarter_of_the_trials_early(
    settings: Settings, two_workers: Workers, tmp_path: Path
) -> None:
    wait_idle(settings)
    study = submit_study(
        ex("st_curve"),
        space=[
            {"type": "float", "name": "st_curve.rate", "low": 0.05, "high": 5.0, "scale": "log"}
        ],
        n_trials=20,
        objective="st_curve.loss",
        strategy="random",
        seed=11,
        pruning={"type": "median", "warmup": 1, "startup": 2},  # >= 30 % in 200 simulations
        parallel=2,
        params={"st_curve": {"log": str(tmp_path)}},
        settings=settings,
    )
    study.wait(timeout=240)
    trials = study.trials
    pruned = [t for t in trials if t["state"] == "pruned"]
    assert len(pruned) >= len(trials) / 4, [(t["state"], t["params"]) for t in trials]
    for trial in pruned:  # stopped early: fewer reports than the 8 steps
        assert len(trial["series"]) < 8 and trial["pruned_step"] is not None
    completed = [t for t in trials if t["state"] == "completed"]
    assert completed and all(len(t["series"]) == 8 for t in completed)
    best = study.best_trial
    assert best is not None and best["value"] == min(t["value"] for t in completed)


def _study_cli(settings: Settings, tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), **settings.to_env()}
    return subprocess.Popen(
        [sys.executable, "-m", "somatize_tasks", "study", str(tmp_path / "plan.json"), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
        start_new_session=True,
    )


def test_a_study_killed_halfway_resumes_without_repeating_a_trial(
    settings: Settings, two_workers: Workers, tmp_path: Path
) -> None:
    wait_idle(settings)
    (tmp_path / "plan.json").write_text(json.dumps(ex("st_quad")))
    (tmp_path / "space.json").write_text(json.dumps(SPACE))
    (tmp_path / "params.json").write_text(json.dumps({"st_quad": {"log": str(tmp_path)}}))
    record = tmp_path / "quad.study.json"
    options = ("--record", str(record), "--params", str(tmp_path / "params.json"))
    first = _study_cli(
        settings,
        tmp_path,
        "--space",
        str(tmp_path / "space.json"),
        "--trials",
        "16",
        "--objective",
        "st_quad",
        "--strategy",
        "random",
        "--seed",
        "3",
        "--parallel",
        "2",
        *options,
    )

    def halfway() -> bool:
        try:
            return StudyRecord.load(record).finished() >= 6
        except Exception:
            return False

    assert wait_for(halfway, 120, 0.05), first.communicate(timeout=5)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(10)
    before = StudyRecord.load(record)
    assert 6 <= before.finished() < 16
    finished_before = {t.number: t.run_id for t in before.trials if t.state == "completed"}
    time.sleep(0.5)  # the trials it left running go on without it
    again = _study_cli(settings, tmp_path, "--resume", "--json", *options)
    out, err = again.communicate(timeout=180)
    assert again.returncode == 0, err
    summary = json.loads(out)
    assert (summary["trials"], summary["completed"]) == (16, 16)
    assert list(summary)[-1] == "best_trial" and summary["best_trial"]["value"] >= QUAD_MINIMUM
    after = StudyRecord.load(record)
    assert [t.number for t in after.trials] == list(range(16))
    assert {t.number: t.run_id for t in after.trials if t.number in finished_before} == (
        finished_before
    )  # kept as they were, not run again
    assert runs(tmp_path, "quad") == 16  # each trial's node ran exactly once


def test_a_grid_runs_each_configuration_per_seed_and_a_repeated_study_costs_nothing(
    settings: Settings, two_workers: Workers, tmp_path: Path
) -> None:
    wait_idle(settings)
    space = [{"type": "categorical", "name": "st_curve.rate", "choices": [0.5, 2.0]}]

    def grid() -> Any:
        return submit_study(
            ex("st_curve"),
            space=space,
            n_trials=10,  # more than the grid: the whole grid, once
            objective="st_curve.loss",
            strategy="grid",
            seeds=[1, 2],
            params={"st_curve": {"log": str(tmp_path), "pause": 0.01}},
            settings=settings,
        )

    study = grid()
    best = study.wait(timeout=120)
    trials = study.trials
    assert len(trials) == 4 and study.total == 4
    assert sorted((t["params"]["st_curve.rate"], t["seed"]) for t in trials) == [
        (0.5, 1),
        (0.5, 2),
        (2.0, 1),
        (2.0, 2),
    ]
    assert best is not None and best["params"]["st_curve.rate"] == 2.0
    for trial in trials:  # the node saw its trial and its seed
        output = PlanRun.attach(trial["run_id"], settings).result("st_curve")
        assert output["seed"] == trial["seed"] == output["trial"]["seed"]
        assert output["trial"]["number"] == trial["number"]
    assert runs(tmp_path, "curve") == 4
    again = grid()
    again.wait(timeout=120)
    assert [t["value"] for t in again.trials] == [t["value"] for t in trials]
    assert runs(tmp_path, "curve") == 4  # every trial of the second study was a cache hit
