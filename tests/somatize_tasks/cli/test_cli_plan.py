"""``somatize-tasks plan``: the report, --json, --mermaid, and clear errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from scheduler import DistributionPlan
from somatize_tasks.cli import main

EXAMPLES = Path(__file__).resolve().parents[3] / "somatize_tasks" / "examples"
SCHEDULE_INPUT = EXAMPLES / "pipeline.schedule-input.json"
PLAN = EXAMPLES / "pipeline.plan.json"
WORKERS = EXAMPLES / "workers.json"


def run(*args: str) -> Any:
    return CliRunner().invoke(main, ["plan", *args])


def _write(tmp_path: Path, name: str, content: Any) -> str:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def test_bundled_examples_match_the_shared_ones() -> None:
    shared = Path("/work/shared/examples")
    if not shared.is_dir():
        pytest.skip("the shared examples are not on this machine")
    for name in ("pipeline.plan.json", "workers.json", "pipeline.schedule-input.json"):
        assert json.loads((EXAMPLES / name).read_text()) == json.loads((shared / name).read_text())


def test_report_shows_workers_phases_transfers() -> None:
    result = run(str(SCHEDULE_INPUT))
    assert result.exit_code == 0, result.output
    out = result.output
    assert "11 nodes on 2 of 2 workers, 3 phases, 2 transfers" in out
    assert "GPU-A100 (gpu-1): 1 node, 1 transfer in, 1 out" in out
    assert "only worker with tag 'gpu'" in out
    assert "Phases, in execution order" in out
    assert "normalize @ cpu-1" in out and "train_svm @ gpu-1" in out


def test_json_prints_exactly_the_distribution_plan() -> None:
    result = run(str(SCHEDULE_INPUT), "--json")
    assert result.exit_code == 0
    plan = DistributionPlan.load(result.output)
    assert plan.model_dump(mode="json") == json.loads(result.output)
    assert {a.node_id: a.worker_id for a in plan.assignments}["train_svm"] == "gpu-1"


def test_bare_plan_with_workers_file_and_example_flag_agree() -> None:
    bare = run(str(PLAN), "--workers", str(WORKERS), "--json")
    example = run("--example", "--json")
    assert bare.exit_code == example.exit_code == 0
    assert bare.output == example.output == run(str(SCHEDULE_INPUT), "--json").output


def test_mermaid_draws_a_box_per_worker_and_highlights_transfers() -> None:
    result = run("--example", "--mermaid")
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0] == "flowchart LR"
    assert '    subgraph w0["GPU-A100 (gpu-1)"]' in lines
    assert sum(1 for line in lines if "==> " in line) == 2
    assert any(line.strip().startswith("linkStyle") for line in lines)


def test_placement_error_is_one_line_on_stderr(tmp_path: Path) -> None:
    workers = [w for w in json.loads(WORKERS.read_text()) if "gpu" not in w["tags"]]
    path = _write(tmp_path, "w.json", workers)
    result = run(str(PLAN), "--workers", path)
    assert result.exit_code == 1
    assert "0/1 workers can take 'train_svm'" in result.stderr
    assert "Traceback" not in result.output
    fallback = run(str(PLAN), "--workers", path, "--allow-local-fallback", "--json")
    assert fallback.exit_code == 0
    assert json.loads(fallback.output)["assignments"] == []


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("{not json", "is not valid JSON"),
        ({"plan": {"Execute": {}}, "workers": []}, "Execute.node_id: field required"),
        ({"plan": {"Execute": {"node_id": "a"}}}, "holds a bare plan"),
        ({"plan": "Empty", "workers": [], "extra": 1}, "unknown key(s) 'extra'"),
        ({"plan": "Empty", "workers": [{"id": ""}]}, "[0].id"),
        ({"Execute": {"node_id": "a"}}, "--workers WORKERS.json"),
    ],
)
def test_bad_input_is_a_clear_error(tmp_path: Path, content: Any, words: str) -> None:
    result = run(_write(tmp_path, "in.json", content))
    assert result.exit_code == 1
    assert words in result.stderr
    assert result.stdout == ""
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)


def test_missing_file_and_bad_flags(tmp_path: Path) -> None:
    missing = run(str(tmp_path / "nope.json"))
    assert missing.exit_code == 1 and "does not exist" in missing.stderr
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00")
    assert "not UTF-8" in run(str(binary)).stderr
    assert run().exit_code == 2
    assert run("--example", "--json", "--mermaid").exit_code == 2


def test_installed_console_script_runs_the_bundled_example() -> None:
    beside = Path(sys.executable).parent / "somatize-tasks"  # this venv's, not any on PATH
    script = str(beside) if beside.exists() else shutil.which("somatize-tasks") or ""
    if not script:
        pytest.skip("the somatize-tasks console script is not installed")
    done = subprocess.run(
        [script, "plan", "--example", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["phases"][1]["phase_type"] == "parallel"
    bad = subprocess.run(
        [script, "plan", str(SCHEDULE_INPUT) + ".missing"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 1 and "Traceback" not in bad.stderr and bad.stderr.strip()
