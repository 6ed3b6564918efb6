"""The run commands as a user types them: submit, status, cancel, run, reaper."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from somatize_tasks.config.settings import Settings
from testkit.plans import BRANCH, FORK_JOIN, FORK_JOIN_OPS, FORK_JOIN_OUTPUT, ex, seq
from testkit.workers import REPO, WorkerProcess


def cli(
    *args: str, settings: Settings | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        **(settings.to_env() if settings else {}),
    }
    return subprocess.run(  # noqa: PLW1510 - callers assert on the return code
        [sys.executable, "-m", "somatize_tasks", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
    )


def write(tmp_path: Path, name: str, value: object) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(value))
    return str(path)


def test_run_executes_a_plan_here_and_prints_only_json(tmp_path: Path) -> None:
    plan = write(tmp_path, "plan.json", BRANCH)
    done = cli(
        "run",
        plan,
        "--nodes",
        "testkit.nodes.run_nodes",
        "--input",
        write(tmp_path, "in.json", 20),
        "--json",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == 40


@pytest.mark.parametrize(
    ("content", "expected"),
    [("{not json", "is not valid JSON: "), ('{"Nope": 1}', "is not a plan variant")],
)
def test_bad_plan_files_get_one_clear_line(tmp_path: Path, content: str, expected: str) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(content)
    done = cli("run", str(plan))
    assert done.returncode == 1
    assert expected in done.stderr and "Traceback" not in done.stderr


def test_run_names_a_failing_node(tmp_path: Path) -> None:
    plan = write(tmp_path, "plan.json", seq(ex("rt_add"), ex("rt_fail")))
    done = cli(
        "run", plan, "--nodes", "testkit.nodes.run_nodes", "--input", write(tmp_path, "i.json", 1)
    )
    assert done.returncode == 1
    assert "node 'rt_fail' failed: ValueError: rt_fail failed on purpose" in done.stderr


@pytest.mark.slow
def test_submit_wait_json_then_status(
    tmp_path: Path, settings: Settings, two_workers: tuple[WorkerProcess, WorkerProcess]
) -> None:
    plan = write(tmp_path, "plan.json", FORK_JOIN)
    ops = write(tmp_path, "ops.json", FORK_JOIN_OPS)
    done = cli(
        "submit", plan, "--ops", ops, "--wait", "--json", "--require-workers", settings=settings
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == FORK_JOIN_OUTPUT
    run_id = done.stderr.split("run ", 1)[1].split()[0]
    status = cli("status", run_id, "--json", settings=settings)
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)
    assert shown["state"] == "done"
    assert shown["progress"] == {"done": 5, "total": 5, "cached": 0}  # cache off here
    assert cli("cancel", run_id, settings=settings).stdout.startswith(
        f"run {run_id} had already ended"
    )


def test_status_of_an_unknown_run_is_one_line(settings: Settings) -> None:
    done = cli("status", "no-such-run", settings=settings)
    assert done.returncode == 1
    assert "run no-such-run is not known to Redis" in done.stderr


def test_reaper_once_sweeps_and_exits(settings: Settings) -> None:
    lonely = settings.model_copy(update={"key_prefix": settings.key_prefix + "-reaper"})
    done = cli("reaper", "--once", settings=lonely)
    assert done.returncode == 0, done.stderr
    assert "no run needed repair" in done.stdout


def test_a_worker_whose_node_module_cannot_be_imported_stops_with_a_clear_error(
    settings: Settings,
) -> None:
    args = ("worker", "--worker-id", "broken", "--nodes", "no_such_module_here")
    done = cli(*args, settings=settings, timeout=60)
    assert done.returncode == 1
    assert "cannot load node module 'no_such_module_here'" in done.stderr
    assert "Traceback" not in done.stderr
