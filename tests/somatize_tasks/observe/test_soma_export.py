"""``somatize-tasks export RUN_ID --soma DIR`` on real runs, checked against Soma's schema.

The expected fields are Soma's (``soma-core/src/event.rs``, ``tracking.rs``):
an ``EventEnvelope`` per line (``seq``, ``ts``, ``event_type`` + the
variant's fields, durations in ms), a ``RunManifest`` and a ``RunStatus``.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from somatize_tasks import submit_plan
from somatize_tasks.cli import main
from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import NodeFailedError
from testkit.plans import FORK_JOIN, FORK_JOIN_OPS, FORK_JOIN_OUTPUT, ex, remote, seq
from testkit.workers import WorkerProcess

pytestmark = pytest.mark.slow
FAILING = seq(ex("rt_make"), remote("gpu", ex("rt_fail")), ex("rt_sum"))  # rt_fail alone in a task

# Soma's Event variants this exporter writes, with each one's fields and their types.
FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "RunStarted": {"run_id": str, "plan_summary": dict},
    "NodeStarted": {"run_id": str, "node_id": str, "kind": str, "effectful": bool},
    "NodeCompleted": {"run_id": str, "node_id": str, "duration": int, "output_summary": str},
    "NodeFailed": {"run_id": str, "node_id": str, "error": str},
    "RunCompleted": {"run_id": str, "duration": int},
    "RunFailed": {"run_id": str, "error": str},
}


def _export(settings: Settings, run_id: str, root: Path) -> Path:
    done = CliRunner().invoke(
        main, ["export", run_id, "--soma", str(root)], env=settings.to_env(), catch_exceptions=False
    )
    assert done.exit_code == 0, done.output
    run_dir = root / "runs" / run_id
    assert str(run_dir) in done.output
    return run_dir


def _events(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    assert [e["seq"] for e in events] == list(range(len(events)))
    stamps = [datetime.fromisoformat(e["ts"]) for e in events]
    assert stamps == sorted(stamps) and all(s.utcoffset() is not None for s in stamps)
    for event in events:
        fields = FIELDS[event["event_type"]]
        assert set(event) == {"seq", "ts", "event_type", *fields}, event
        for name, kind in fields.items():
            assert isinstance(event[name], kind), (name, event)
        if event["event_type"] == "NodeStarted":
            assert event["kind"] in ("Stateless", "Trainable", "Opaque")
    return events


def test_a_finished_run_exports_as_a_soma_run_directory(
    tmp_path: Path, settings: Settings, two_workers: tuple[WorkerProcess, WorkerProcess]
) -> None:
    run = submit_plan(FORK_JOIN, ops=FORK_JOIN_OPS, settings=settings, require_workers=True)
    assert run.wait(timeout=60) == FORK_JOIN_OUTPUT
    run_dir = _export(settings, run.id, tmp_path / ".soma")
    events = _events(run_dir)
    assert events[0]["event_type"] == "RunStarted" and events[-1]["event_type"] == "RunCompleted"
    assert events[0]["plan_summary"] == {
        "total_nodes": len(run.status().nodes),
        "cached_nodes": 0,
        "parallel_branches": 2,
    }
    started = {e["node_id"] for e in events if e["event_type"] == "NodeStarted"}
    completed = {e["node_id"] for e in events if e["event_type"] == "NodeCompleted"}
    ran = {n for n, s in run.status().nodes.items() if s.started_at is not None}
    assert started == completed == ran
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["schema_version"] == 1 and manifest["run_id"] == run.id
    assert manifest["kind"] == "other" and manifest["graph"]["n_nodes"] == len(run.status().nodes)
    datetime.fromisoformat(manifest["created_at"])
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "completed" and status["finished_at"]
    assert (run_dir / "metrics.jsonl").read_text() == ""


def test_a_failed_run_exports_its_node_failure_and_run_failure(
    tmp_path: Path, settings: Settings, two_workers: tuple[WorkerProcess, WorkerProcess]
) -> None:
    run = submit_plan(FAILING, settings=settings, require_workers=True)
    with pytest.raises(NodeFailedError):
        run.wait(timeout=60)
    events = _events(_export(settings, run.id, tmp_path))
    failed = [e for e in events if e["event_type"] == "NodeFailed"]
    assert [e["node_id"] for e in failed] == ["rt_fail"]
    assert failed[0]["error"] == "ValueError: rt_fail failed on purpose", failed
    assert events[-1]["event_type"] == "RunFailed" and "rt_fail" in events[-1]["error"]
    assert "rt_sum" not in {e.get("node_id") for e in events}
    status = json.loads((tmp_path / "runs" / run.id / "status.json").read_text())
    assert status["state"] == "failed"


def test_an_unknown_run_is_one_error_line(tmp_path: Path, settings: Settings) -> None:
    done = CliRunner().invoke(
        main, ["export", "no-such-run", "--soma", str(tmp_path)], env=settings.to_env()
    )
    assert done.exit_code == 1
    assert done.output.startswith("Error: ") and done.output.count("\n") == 1, done.output
