"""``somatize-tasks cluster up`` -> ``submit --wait`` with its exports -> ``cluster down``."""

from __future__ import annotations

import json
import re
import subprocess
from importlib import resources
from pathlib import Path

import pytest

from somatize_tasks.workers.machine import detect_gpu
from tests.somatize_tasks.cli.helpers import (
    cli,
    cli_env,
    marked_processes,
    new_marker,
    wait_no_marked,
)

EXAMPLES = resources.files("somatize_tasks.examples")


def _run(
    args: list[str], env: dict[str, str], timeout_s: float = 90
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli(*args), env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )


def _exports(stdout: str) -> dict[str, str]:
    found = dict(re.findall(r"^export (SOMATIZE_[A-Z0-9_]+)=(\S+)$", stdout, flags=re.M))
    assert found, stdout
    return found


@pytest.mark.slow
def test_up_submit_down_leaves_no_process(tmp_path: Path) -> None:
    marker = new_marker()
    run_dir = tmp_path / "cluster"
    (tmp_path / "tmp").mkdir()
    env = cli_env(marker, TMPDIR=str(tmp_path / "tmp"))  # the remembered run dir lives there
    up = _run(
        ["cluster", "up", "--workers", "2", "--tags", "gpu,cpu", "--run-dir", str(run_dir)], env
    )
    try:
        assert up.returncode == 0, up.stderr
        exports = _exports(up.stdout)
        lines = set(up.stdout.strip().splitlines())
        assert lines == {f"export {k}={v}" for k, v in exports.items()}  # nothing else on stdout
        assert len(marked_processes(marker)) >= 3  # Redis and two workers outlive `up`

        again = _run(["cluster", "up", "--run-dir", str(run_dir)], env)
        assert again.returncode == 1 and "already running" in again.stderr

        listed = _run(["cluster", "env", "--run-dir", str(run_dir)], env)
        assert _exports(listed.stdout) == exports
        # What `up` tells people to paste: `eval "$(somatize-tasks cluster env)"`, no --run-dir.
        remembered = _run(["cluster", "env"], env)
        assert remembered.returncode == 0, remembered.stderr
        assert _exports(remembered.stdout) == exports
        shown = json.loads(_run(["workers", "--json"], {**env, **exports}).stdout)
        gpu_worker = next(w for w in shown if w["id"] == "local-gpu-1")
        assert gpu_worker["gpu"] is detect_gpu()  # a gpu tag alone claims no GPU
        status = _run(["cluster", "status", "--run-dir", str(run_dir)], env)
        assert status.returncode == 0 and "2 live worker(s)" in status.stdout, status.stderr

        submit = _run(
            [
                "submit",
                str(EXAMPLES / "pipeline.plan.json"),
                "--params",
                str(EXAMPLES / "pipeline.params.json"),
                "--wait",
                "--json",
                "--require-workers",
                "--timeout",
                "60",
            ],
            {**env, **exports},
        )
        assert submit.returncode == 0, submit.stderr
        output = json.loads(submit.stdout)
        assert output["budget"] == 3 and output["accuracy"] == pytest.approx(0.955)
        assert "local-gpu-1" in submit.stderr  # the distribution shows the gpu worker
        # The cluster signs its messages with a key of its own, kept from other users.
        assert len(exports["SOMATIZE_MESSAGE_KEY"]) == 64
        assert (run_dir / "cluster.json").stat().st_mode & 0o077 == 0
        logs = sorted((run_dir / "logs").glob("local-*.log"))
        assert len(logs) == 2
        for log in logs:
            assert "task messages are signed" in log.read_text(), log.name
            assert exports["SOMATIZE_MESSAGE_KEY"] not in log.read_text()
    finally:
        down = _run(["cluster", "down"], env)  # the remembered run dir, again
    assert down.returncode == 0, down.stderr
    assert "stopped 3 process(es)" in down.stderr
    assert wait_no_marked(marker, timeout_s=5) == []
    assert not run_dir.exists()
    gone = _run(["cluster", "down", "--run-dir", str(run_dir)], env)
    assert gone.returncode == 0 and "nothing to stop" in gone.stderr
    status = _run(["cluster", "status", "--run-dir", str(run_dir)], env)
    assert status.returncode == 1 and "no cluster recorded" in status.stderr
