"""The command line's rough edges a newcomer hit, each as they would hit it.

Real Redis and real workers throughout; the only process under test is the
``somatize-tasks`` command itself.
"""

from __future__ import annotations

import io
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from scheduler import ExecutionPlan, WorkerInfo, schedule
from somatize_tasks import PlanRun
from somatize_tasks.cli.plan import print_report
from somatize_tasks.config.settings import Settings
from somatize_tasks.observe.run_record import read_run
from somatize_tasks.observe.timeline import bars_of, not_run
from somatize_tasks.runtime.compile.program import compile_program
from somatize_tasks.runtime.recovery.recompute import describe_blocks
from testkit.plans import ex, remote, seq
from testkit.services import wait_for
from testkit.workers import REPO, WorkerProcess
from tests.somatize_tasks.cli.test_cli_runs import write

SLOW = seq(ex("rt_make"), ex("rt_sleep"), remote("gpu", ex("rt_sum")))  # rt_sum: a task of its own


@pytest.mark.parametrize(
    "url",
    [
        "localhost:6379",
        "redis://localhost:notaport/0",
        "redis://localhost/zero",
        "http://localhost:6379",
    ],
)
@pytest.mark.parametrize(
    "command",
    [
        ["workers"],
        ["status", "abc"],
        ["cancel", "abc"],
        ["submit", "PLAN"],
        ["timeline", "abc", "-o", "t.html"],
        ["export", "abc", "--soma", "out"],
        ["worker", "--worker-id", "w"],
    ],
)
def test_a_malformed_redis_url_is_one_error_line(
    tmp_path: Path, url: str, command: list[str]
) -> None:
    plan = write(tmp_path, "plan.json", ex("rt_make"))
    args = [plan if part == "PLAN" else part for part in command]
    done = subprocess.run(  # noqa: PLW1510 - asserted below
        [sys.executable, "-m", "somatize_tasks", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "SOMATIZE_REDIS_URL": url},
    )
    assert done.returncode == 1, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    assert "SOMATIZE_REDIS_URL" in lines[0] and "redis://" in lines[0]


@pytest.mark.parametrize("flags", [(), ("--require-workers",)])
def test_submit_with_no_live_worker_refuses_naming_the_redis_and_local(
    tmp_path: Path, settings: Settings, flags: tuple[str, ...]
) -> None:
    lonely = settings.model_copy(update={"key_prefix": f"{settings.key_prefix}-none"})
    done = cli("submit", write(tmp_path, "plan.json", ex("rt_make")), *flags, settings=lonely)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("Error: ")
    assert f"in Redis {settings.redis_url} (key prefix '{lonely.key_prefix}')" in done.stderr
    assert "pass --local to run the plan in this process" in done.stderr
    assert "will execute locally" not in done.stderr and "require_workers=" not in done.stderr


def test_plan_hints_name_the_flag(tmp_path: Path) -> None:
    plan = remote("gpu", ex("train"))
    workers = [{"id": "c", "name": "c", "tags": ["cpu"], "max_concurrent": 2}]
    done = cli(
        "plan", write(tmp_path, "p.json", {"plan": plan, "workers": workers}), settings=Settings()
    )
    assert done.returncode == 1
    assert "--allow-local-fallback" in done.stderr and "allow_local_fallback=" not in done.stderr


def test_submit_without_wait_prints_the_run_id_on_stdout_and_honest_transfer_names(
    tmp_path: Path, settings: Settings, two_workers: tuple[WorkerProcess, WorkerProcess]
) -> None:
    plan = seq(ex("rt_make"), remote("gpu", ex("rt_sum")))
    done = cli("submit", write(tmp_path, "plan.json", plan), "--require-workers", settings=settings)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    assert re.fullmatch(r"[0-9a-f-]{8,}", run_id), done.stdout
    assert PlanRun.attach(run_id, settings).wait(timeout=60) is not None
    assert "inline if ≤ 1 KiB, else s3" in done.stderr, done.stderr
    assert "1 transfer" in done.stderr and "1 transfers" not in done.stderr
    local = settings.model_copy(update={"store_kind": "local"})
    again = cli("submit", write(tmp_path, "plan.json", plan), settings=local)
    assert "else shared directory" in again.stderr and "│ s3" not in again.stderr
    PlanRun.attach(again.stdout.strip(), local).wait(timeout=60)


def cli(*args: str, settings: Settings) -> subprocess.CompletedProcess[str]:
    """``somatize-tasks ARGS`` in a wide terminal, so table cells do not wrap."""
    return subprocess.run(  # noqa: PLW1510 - callers assert on the return code
        [sys.executable, "-m", "somatize_tasks", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(REPO),
            "COLUMNS": "200",
            **settings.to_env(),
        },
    )


def _wait_in_background(tmp_path: Path, settings: Settings) -> tuple[subprocess.Popen[str], str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "PYTHONUNBUFFERED": "1",
        **settings.to_env(),
    }
    params = write(tmp_path, "params.json", {"rt_sleep": {"s": 6}})
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "somatize_tasks",
            "submit",
            write(tmp_path, "plan.json", SLOW),
            "--params",
            params,
            "--wait",
            "--require-workers",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert proc.stderr is not None
    first = proc.stderr.readline()  # "run <id>", before the placement report
    found = re.match(r"run (\S+)", first)
    assert found, first
    run = PlanRun.attach(found.group(1), settings)
    assert wait_for(lambda: run.status().nodes["rt_sleep"].state == "running", 30, 0.1)
    time.sleep(0.3)  # well inside the following loop
    return proc, found.group(1)


def test_ctrl_c_of_submit_wait_says_the_run_goes_on_and_how_to_cancel_it(
    tmp_path: Path, settings: Settings, two_workers: tuple[WorkerProcess, WorkerProcess]
) -> None:
    proc, run_id = _wait_in_background(tmp_path, settings)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "Aborted!" not in err and "Traceback" not in err
    assert "goes on" in err and f"somatize-tasks cancel {run_id}" in err
    run = PlanRun.attach(run_id, settings)
    assert run.status().state == "running"
    assert run.wait(timeout=60) is not None  # it did go on


def test_a_second_ctrl_c_within_two_seconds_cancels_the_run(
    tmp_path: Path, settings: Settings, two_workers: tuple[WorkerProcess, WorkerProcess]
) -> None:
    proc, run_id = _wait_in_background(tmp_path, settings)
    proc.send_signal(signal.SIGINT)
    assert proc.stderr is not None
    assert wait_for(lambda: "again within" in proc.stderr.readline(), 10, 0)  # type: ignore[union-attr]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert f"run {run_id} cancelled" in err, err
    assert PlanRun.attach(run_id, settings).status().state == "cancelled"
    # The timeline marks it: the cut-off node's bar is cancelled, the one after it never ran.
    record = read_run(settings, run_id)
    bars = bars_of(record.status, record.history)
    assert [b.state for b in bars if b.node_id == "rt_sleep"] == ["cancelled"]
    assert not_run(record.status, bars) == {"rt_sum": "cancelled"}


def test_the_report_says_1_phase_and_1_transfer() -> None:
    plan = ExecutionPlan.model_validate(seq(ex("a"), remote("gpu", ex("b"))))
    workers = [WorkerInfo(id="g", name="g", tags=["gpu"]), WorkerInfo(id="c", name="c")]
    text = io.StringIO()
    print_report(schedule(plan, workers), workers, console=Console(file=text, width=120))
    first = text.getvalue().splitlines()[0]
    assert "1 transfer" in first and "1 transfers" not in first, first
    single = ExecutionPlan.model_validate(ex("a"))
    text = io.StringIO()
    print_report(schedule(single, workers), workers, console=Console(file=text, width=120))
    assert "1 phase," in text.getvalue() and "0 transfers" in text.getvalue()


def test_the_reroute_log_names_nodes_not_block_ids() -> None:
    plan = ExecutionPlan.model_validate(seq(ex("load"), ex("train_svm")))
    program = compile_program(plan)
    ids = [b.index for b in program.blocks if b.task_node_ids() == ["train_svm"]]
    shown = describe_blocks(program, [(ids[0], 0), (ids[0], 3)])
    assert shown == "node(s) train_svm, train_svm (pass 3)"


def test_the_worker_banner_hides_no_missing_password_and_lists_its_catalog(
    two_workers: tuple[WorkerProcess, WorkerProcess],
) -> None:
    log = two_workers[1].log()
    assert ":**@" not in log
    assert re.search(r"transport:\s+redis://127\.0\.0\.1:\d+/0", log), log[:2000]
    catalog = log.split("[catalog]", 1)[1].split("\n\n", 1)[0]
    assert "rt_make" in catalog and "normalize" in catalog
