"""The command line, quiet where it should be and saying what matters: a one-screen
summary for big plans, ``--quiet`` and ``--table``, ``--local``, loop-cap warnings,
``--nodes`` from the current directory everywhere, ``runs``, ``plan --live``, and
Flower names that carry the run."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest

from somatize_tasks.catalog.entries import load_catalog_modules
from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import RunError
from somatize_tasks.runtime.engine.dispatch import node_shadow
from somatize_tasks.runtime.producer.handle import PlanRun
from somatize_tasks.runtime.producer.submit import submit_plan
from testkit.nodes import run_nodes  # noqa: F401  (registers the catalog here)
from testkit.plans import ex, par, seq
from testkit.workers import REPO, WorkerProcess
from tests.somatize_tasks.cli.test_cli_runs import cli, write

Workers = tuple[WorkerProcess, WorkerProcess]
WIDE = 300  # branches: far more than a screen of rows
NEVER_STOPS = {
    "Loop": {
        "node_id": "spin",
        "body": seq(ex("sm_inc"), ex("sm_never_stop")),
        "max_iterations": 3,
        "until": {"type": "WhenSignaled", "node": "sm_never_stop"},
        "carry_from": "sm_inc",
    }
}
CAP_WARNING = (
    "loop 'spin' stopped at its cap of 3 passes without a stop signal from 'sm_never_stop'"
)


def wide_plan() -> Any:
    return seq(ex("rt_add"), par(*(ex(f"rt_double_{i}") for i in range(2, WIDE + 2))))


@pytest.mark.slow
def test_submit_summarises_a_big_plan_on_one_screen_and_table_lists_every_row(
    tmp_path: Path, settings: Settings, two_workers: Workers
) -> None:
    plan = write(tmp_path, "wide.json", wide_plan())
    summary = cli("submit", plan, "--input", write(tmp_path, "in.json", 1), settings=settings)
    assert summary.returncode == 0, summary.stderr
    run_id = summary.stdout.strip()
    assert len(summary.stderr.splitlines()) < 25, summary.stderr
    assert f"{WIDE + 1} nodes on 2 workers" in summary.stderr
    assert "(--table lists every node)" in summary.stderr
    assert "rt_double_150" not in summary.stderr
    PlanRun.attach(run_id, settings).wait(timeout=120)

    table = cli(
        "submit", plan, "--input", write(tmp_path, "in.json", 1), "--table", settings=settings
    )
    assert table.returncode == 0, table.stderr
    assert all(f"rt_double_{i}" in table.stderr for i in (2, 150, WIDE + 1))
    assert len(table.stderr.splitlines()) > WIDE
    PlanRun.attach(table.stdout.strip(), settings).wait(timeout=120)


@pytest.mark.slow
def test_quiet_prints_the_run_id_or_the_output_and_nothing_else(
    tmp_path: Path, settings: Settings, two_workers: Workers
) -> None:
    plan = write(tmp_path, "p.json", seq(ex("rt_add"), ex("rt_double")))
    given = write(tmp_path, "in.json", 4)
    quiet = cli("submit", plan, "--input", given, "--quiet", settings=settings)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == ""
    run_id = quiet.stdout.strip()
    assert PlanRun.attach(run_id, settings).wait(timeout=60) == 10
    waited = cli("submit", plan, "--input", given, "--wait", "-q", settings=settings)
    assert waited.returncode == 0, waited.stderr
    assert (waited.stderr, json.loads(waited.stdout)) == ("", 10)


def test_local_runs_the_plan_in_this_process(tmp_path: Path, settings: Settings) -> None:
    lonely = settings.model_copy(update={"key_prefix": f"{settings.key_prefix}-alone"})
    plan = write(tmp_path, "p.json", seq(ex("rt_add"), ex("rt_double")))
    done = cli(
        "submit",
        plan,
        "--input",
        write(tmp_path, "in.json", 4),
        "--local",
        "--nodes",
        "testkit.nodes.run_nodes",
        "--json",
        settings=lonely,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == 10


def test_the_python_submit_plan_keeps_its_local_fallback_with_a_warning(
    settings: Settings,
) -> None:
    lonely = settings.model_copy(update={"key_prefix": f"{settings.key_prefix}-alone"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = submit_plan(ex("rt_double"), input=2, settings=lonely)
    assert run.wait() == 4
    assert any("running the plan in this process" in str(w.message) for w in caught)


def test_a_loop_stopped_by_its_cap_says_so_here(tmp_path: Path) -> None:
    done = cli(
        "run",
        write(tmp_path, "loop.json", NEVER_STOPS),
        "--nodes",
        "testkit.nodes.soma_nodes",
        "--input",
        write(tmp_path, "in.json", 0),
    )
    assert done.returncode == 0, done.stderr
    assert f"warning: {CAP_WARNING}" in " ".join(done.stderr.split())
    exhaust = json.loads(
        json.dumps(NEVER_STOPS).replace('"WhenSignaled", "node": "sm_never_stop"', '"Exhaust"')
    )
    assert exhaust["Loop"]["until"] == {"type": "Exhaust"}
    quiet = cli(
        "run",
        write(tmp_path, "exhaust.json", exhaust),
        "--nodes",
        "testkit.nodes.soma_nodes",
    )
    assert quiet.returncode == 0, quiet.stderr
    assert "warning" not in quiet.stderr  # Exhaust runs to its cap on purpose


@pytest.mark.slow
def test_a_loop_stopped_by_its_cap_says_so_in_the_run_and_on_the_command_line(
    tmp_path: Path, settings: Settings, two_workers: Workers
) -> None:
    plan = write(tmp_path, "loop.json", NEVER_STOPS)
    done = cli(
        "submit", plan, "--input", write(tmp_path, "in.json", 0), "--wait", settings=settings
    )
    assert done.returncode == 0, done.stderr
    assert f"warning: {CAP_WARNING}" in " ".join(done.stderr.split())
    run = submit_plan(NEVER_STOPS, input=0, settings=settings, require_workers=True)
    assert run.wait(timeout=60) == 3.0
    assert CAP_WARNING in run.warnings
    status = cli("status", run.id, "--json", settings=settings)
    assert CAP_WARNING in json.loads(status.stdout)["warnings"]


# --- --nodes from the current directory ----------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path]:
    """A user's project with its own node module, and a launcher outside it (as the
    installed ``somatize-tasks`` script is: its directory, not the project, on sys.path)."""
    root = tmp_path / "project"
    (root / "mylab").mkdir(parents=True)
    (root / "mylab" / "__init__.py").write_text("")
    (root / "mylab" / "nodes.py").write_text(
        textwrap.dedent(
            """
            from somatize_tasks import node

            @node("mylab_triple")
            def triple(x):
                return x * 3
            """
        )
    )
    (root / "plan.json").write_text(json.dumps(ex("mylab_triple")))
    (root / "in.json").write_text("5")
    launcher = tmp_path / "bin" / "somatize-tasks"
    launcher.parent.mkdir()
    launcher.write_text("from somatize_tasks.cli import main\nmain()\n")
    return root, launcher


def launch(launcher: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: PLW1510 - callers assert on the return code
        [sys.executable, str(launcher), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO)},
    )


@pytest.mark.parametrize("command", [("run",), ("submit", "--local")])
def test_nodes_are_found_from_the_current_directory_as_workers_find_them(
    project: tuple[Path, Path], command: tuple[str, ...]
) -> None:
    root, launcher = project
    args = ("plan.json", "--nodes", "mylab.nodes", "--input", "in.json", "--json")
    done = launch(launcher, *command, *args, cwd=root)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == 15


def test_a_worker_loads_its_nodes_from_the_current_directory(
    project: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _ = project
    monkeypatch.chdir(root)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(root))])
    monkeypatch.delitem(sys.modules, "mylab", raising=False)
    assert "mylab_triple" in load_catalog_modules(["mylab.nodes"])


# --- runs, plan --live, Flower names -------------------------------------------------


@pytest.mark.slow
def test_runs_lists_recent_runs_with_filters(
    tmp_path: Path, settings: Settings, two_workers: Workers
) -> None:
    good = [submit_plan(ex("rt_double"), input=i, settings=settings) for i in (1, 2)]
    bad = submit_plan(ex("rt_fail"), settings=settings, require_workers=True)
    for run in [*good, bad]:
        with contextlib.suppress(RunError):  # the failed one raises; it is meant to
            run.wait(timeout=60)
    newest = json.loads(cli("runs", "--limit", "2", "--json", settings=settings).stdout)
    assert [r["run_id"] for r in newest] == [bad.id, good[1].id]
    assert newest[1] | {"created_at": 0} == {
        "run_id": good[1].id,
        "state": "done",
        "done": 1,
        "total": 1,
        "created_at": 0,
        "finished_at": newest[1]["finished_at"],
        "error": None,
    }
    failed = json.loads(cli("runs", "--state", "failed", "--json", settings=settings).stdout)
    assert bad.id in [r["run_id"] for r in failed]
    assert {r["state"] for r in failed} == {"failed"}
    table = cli("runs", "--limit", "3", settings=settings)
    assert table.returncode == 0, table.stderr
    for header in ("run", "state", "progress", "age", "nodes"):
        assert header in table.stdout
    assert good[0].id in table.stdout and "1/1" in table.stdout


@pytest.mark.slow
def test_plan_live_places_on_the_live_workers(
    tmp_path: Path, settings: Settings, two_workers: Workers
) -> None:
    gpu, cpu = two_workers
    plan = write(tmp_path, "p.json", par(ex("rt_add"), ex("rt_double")))
    done = cli("plan", plan, "--live", "--json", settings=settings)
    assert done.returncode == 0, done.stderr
    placed = {a["worker_id"] for a in json.loads(done.stdout)["assignments"]}
    assert placed <= {gpu.worker_id, cpu.worker_id} and placed
    lonely = settings.model_copy(update={"key_prefix": f"{settings.key_prefix}-alone"})
    none = cli("plan", plan, "--live", settings=lonely)
    assert none.returncode == 1
    assert none.stderr.strip().splitlines() == [
        f"Error: no live worker in Redis {settings.redis_url} (key prefix "
        f"'{lonely.key_prefix}'): start one, or place on a file's with --workers"
    ]


def test_flower_names_carry_the_run() -> None:
    assert node_shadow(["train_svm"], "1a2b3c4d5e6f7a8b") == "node:train_svm run:1a2b3c"
    assert node_shadow(["a", "b"], "ffff0000") == "node:a+b run:ffff00"
