"""The timeline: drawn from a real run's status, checked by reading the SVG back."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from somatize_tasks import submit_plan
from somatize_tasks.cli import main
from somatize_tasks.runtime.handle import NodeStatus, RunStatus
from somatize_tasks.settings import Settings
from somatize_tasks.timeline import STATE_COLOURS, timeline_html, timeline_svg
from tests.conftest import WorkerProcess
from tests.runtime.plans import FORK_JOIN, FORK_JOIN_OPS, FORK_JOIN_OUTPUT

SVG = "{http://www.w3.org/2000/svg}"


def _rows(svg: str) -> dict[str, ET.Element]:
    root = ET.fromstring(svg.encode())
    return {g.get("data-worker", ""): g for g in root.iter(f"{SVG}g") if g.get("class") == "row"}


def _transfers(svg: str) -> list[ET.Element]:
    root = ET.fromstring(svg.encode())
    return [p for p in root.iter(f"{SVG}path") if p.get("class") == "transfer"]


@pytest.mark.slow
def test_a_real_run_draws_a_bar_per_node_on_its_worker_and_an_arrow_per_transfer(
    settings: Settings, two_workers: tuple[WorkerProcess, WorkerProcess], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = submit_plan(FORK_JOIN, ops=FORK_JOIN_OPS, settings=settings, require_workers=True)
    assert run.wait(timeout=60) == FORK_JOIN_OUTPUT
    status = run.status()
    assert any(t["transfer_type"] == "s3" for t in status.transfers)

    svg = timeline_svg(status)
    rows = _rows(svg)
    assert {gpu.worker_id for gpu in two_workers} <= set(rows)
    for node_id, node in status.nodes.items():
        bars = [(worker, bar) for worker, row in rows.items() for bar in row.iter(f"{SVG}rect")
                if bar.get("data-node") == node_id]
        assert len(bars) == 1, (node_id, bars)
        worker, bar = bars[0]
        assert worker == node.worker and bar.get("data-state") == "done"
        assert bar.get("fill") == STATE_COLOURS["done"]
        assert float(bar.get("width", 0)) > 0
    arrows = _transfers(svg)
    assert len(arrows) == len(status.transfers)
    drawn = {(a.get("data-from-node"), a.get("data-to-node"), a.get("data-type")) for a in arrows}
    assert drawn == {(t["from_node"], t["to_node"], t["transfer_type"]) for t in status.transfers}

    # The command writes both forms from the run id alone.
    for name, value in settings.to_env().items():
        monkeypatch.setenv(name, value)
    for out in (tmp_path / "run.svg", tmp_path / "run.html"):
        result = CliRunner().invoke(main, ["timeline", run.id, "-o", str(out)])
        assert result.exit_code == 0, result.output
        text = out.read_text()
        embedded = text[text.index("<svg"): text.index("</svg>") + len("</svg>")]
        assert len(_rows(embedded)) == len(rows)
    page = (tmp_path / "run.html").read_text()
    assert "<script" not in page and "https://" not in page and "rt_sum_2" in page


def _status(**nodes: NodeStatus) -> RunStatus:
    return RunStatus("r1", "running", dict(nodes), created_at=100.0, transfers=[
        {"from_node": "a", "to_node": "c", "from_worker": "w1", "to_worker": "w2",
         "transfer_type": "s3", "bytes": 5000, "at": 101.2},
    ])


def test_overlapping_nodes_take_lanes_and_states_take_colours() -> None:
    status = _status(
        a=NodeStatus("done", "w1", 100.0, 101.0),
        b=NodeStatus("failed", "w1", 100.5, 101.5),  # overlaps a: a second lane
        c=NodeStatus("running", "w2", 101.3, None),  # still running: drawn up to now
        d=NodeStatus("pending"),  # never started: no bar
    )
    svg = timeline_svg(status, now=103.0)
    rows = _rows(svg)
    bars = {b.get("data-node"): b for row in rows.values() for b in row.iter(f"{SVG}rect")
            if b.get("class") == "bar"}
    assert set(bars) == {"a", "b", "c"}
    assert float(bars["a"].get("y", 0)) != float(bars["b"].get("y", 0))
    assert bars["b"].get("fill") == STATE_COLOURS["failed"]
    assert bars["c"].get("fill") == STATE_COLOURS["running"]
    assert float(bars["c"].get("width", 0)) > float(bars["a"].get("width", 0))  # 1.7 s vs 1 s
    assert len(_transfers(svg)) == 1
    assert "1.00 s" in svg and "5.0 kB" in svg
    assert "<table>" in timeline_html(status, now=103.0)


def test_the_command_refuses_other_suffixes(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["timeline", "abc", "-o", str(tmp_path / "run.png")])
    assert result.exit_code == 2 and ".html or .svg" in result.output
