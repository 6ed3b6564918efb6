"""The timeline: drawn from a real run's status, checked by reading the SVG back."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from somatize_tasks import submit_plan
from somatize_tasks.cli import main
from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import NodeFailedError
from somatize_tasks.observe.timeline import STATE_COLOURS, timeline_svg
from somatize_tasks.observe.timeline_page import timeline_html
from somatize_tasks.runtime.producer.handle import NodeStatus, RunStatus
from testkit.plans import FORK_JOIN, FORK_JOIN_OPS, FORK_JOIN_OUTPUT, LOOP, ex, remote, seq
from testkit.workers import WorkerProcess

SVG = "{http://www.w3.org/2000/svg}"
FAILING = seq(ex("rt_make"), remote("gpu", ex("rt_fail")), ex("rt_sum"))  # rt_fail alone in a task


def _rows(svg: str) -> dict[str, ET.Element]:
    root = ET.fromstring(svg.encode())
    return {g.get("data-worker", ""): g for g in root.iter(f"{SVG}g") if g.get("class") == "row"}


def _transfers(svg: str) -> list[ET.Element]:
    root = ET.fromstring(svg.encode())
    return [p for p in root.iter(f"{SVG}path") if p.get("class") == "transfer"]


@pytest.mark.slow
def test_a_real_run_draws_a_bar_per_node_on_its_worker_and_an_arrow_per_transfer(
    settings: Settings,
    two_workers: tuple[WorkerProcess, WorkerProcess],
    tmp_path: Path,
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
        bars = [
            (worker, bar)
            for worker, row in rows.items()
            for bar in row.iter(f"{SVG}rect")
            if bar.get("data-node") == node_id
        ]
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
        embedded = text[text.index("<svg") : text.index("</svg>") + len("</svg>")]
        assert len(_rows(embedded)) == len(rows)
    page = (tmp_path / "run.html").read_text()
    assert "<script" not in page and "https://" not in page and "rt_sum_2" in page


def _status(**nodes: NodeStatus) -> RunStatus:
    return RunStatus(
        "r1",
        "running",
        dict(nodes),
        created_at=100.0,
        transfers=[
            {
                "from_node": "a",
                "to_node": "c",
                "from_worker": "w1",
                "to_worker": "w2",
                "transfer_type": "s3",
                "bytes": 5000,
                "at": 101.2,
            },
        ],
    )


def test_overlapping_nodes_take_lanes_and_states_take_colours() -> None:
    status = _status(
        a=NodeStatus("done", "w1", 100.0, 101.0),
        b=NodeStatus("failed", "w1", 100.5, 101.5),  # overlaps a: a second lane
        c=NodeStatus("running", "w2", 101.3, None),  # still running: drawn up to now
        d=NodeStatus("pending"),  # never started: no bar
    )
    svg = timeline_svg(status, now=103.0)
    rows = _rows(svg)
    bars = {
        b.get("data-node"): b
        for row in rows.values()
        for b in row.iter(f"{SVG}rect")
        if b.get("class") == "bar"
    }
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


def _bars(svg: str) -> list[ET.Element]:
    root = ET.fromstring(svg.encode())
    return [r for r in root.iter(f"{SVG}rect") if r.get("class") == "bar"]


def _texts(svg: str, cls: str) -> list[ET.Element]:
    root = ET.fromstring(svg.encode())
    return [t for t in root.iter(f"{SVG}text") if t.get("class") == cls]


def _marks(svg: str) -> dict[str, str]:
    root = ET.fromstring(svg.encode())
    return {
        g.get("data-node", ""): g.get("data-state", "")
        for g in root.iter(f"{SVG}g")
        if g.get("class") == "mark"
    }


def test_failures_are_red_with_their_error_and_nodes_that_never_ran_are_marked() -> None:
    status = RunStatus(
        "r1",
        "failed",
        {
            "a": NodeStatus("done", "w1", 100.0, 101.0),
            "b": NodeStatus("failed", "w1", 101.0, 101.5, "ValueError: bad row 7"),
            "c": NodeStatus("pending"),  # after the failure
            "d": NodeStatus("skipped"),  # an arm not taken
        },
        error={"node_id": "b", "worker_id": "w1", "type": "ValueError", "message": "bad row 7"},
        created_at=100.0,
        finished_at=101.6,
    )
    svg = timeline_svg(status)
    failed = [b for b in _bars(svg) if b.get("data-node") == "b"]
    assert failed and failed[0].get("fill") == STATE_COLOURS["failed"]
    (error,) = _texts(svg, "error")
    assert error.get("data-node") == "b" and "ValueError: bad row 7" in (error.text or "")
    assert _marks(svg) == {"c": "not run", "d": "skipped"}
    page = timeline_html(status)
    assert "class='failure'" in page and "bad row 7" in page


def test_history_draws_a_dead_workers_attempt_and_every_loop_pass() -> None:
    status = RunStatus(
        "r2",
        "done",
        {
            "slow": NodeStatus("done", "w2", 105.0, 107.0),
            "body": NodeStatus("done", "w2", 108.0, 108.5),
        },
        created_at=100.0,
        finished_at=109.0,
    )
    history = [
        {"at": 101.0, "nodes": ["slow"], "state": "running", "worker": "w1", "epoch": 0},
        {"at": 105.0, "nodes": ["slow"], "state": "running", "worker": "w2", "epoch": 0},
        {"at": 107.0, "nodes": ["slow"], "state": "done", "worker": "w2", "epoch": 0},
        *(
            {"at": 107.0 + p * 0.5, "nodes": ["body"], "state": s, "worker": "w2", "epoch": p}
            for p in (1, 2, 3)
            for s in ("running", "done")
        ),
    ]
    svg = timeline_svg(status, history=history)
    bars = _bars(svg)
    slow = sorted(
        (b.get("data-worker"), b.get("data-state")) for b in bars if b.get("data-node") == "slow"
    )
    assert slow == [("w1", "lost"), ("w2", "done")]
    assert sorted(b.get("data-epoch") for b in bars if b.get("data-node") == "body") == [
        "1",
        "2",
        "3",
    ]
    labels = [t.text or "" for t in _texts(svg, "label")]
    assert "slow (worker died)" in labels and "every attempt and loop pass drawn" in svg


def test_hundreds_of_short_nodes_stay_readable_and_labels_stay_inside() -> None:
    nodes = {
        f"step_{i:03d}": NodeStatus("done", "w1", 100.0 + i * 0.01, 100.0 + i * 0.01 + 0.008)
        for i in range(300)
    }
    nodes["a_node_with_a_rather_long_name_at_the_end"] = NodeStatus("done", "w1", 102.99, 103.0)
    status = RunStatus("r3", "done", nodes, created_at=100.0, finished_at=103.0)
    svg = timeline_svg(status)
    assert len(_bars(svg)) == 301  # every node has its bar (and its tooltip)
    labels = _texts(svg, "label")
    assert 0 < len(labels) < 100  # the ones that fit, not a smear of 301
    by_line: dict[str, list[tuple[float, float]]] = {}
    for label in labels:
        x, width = float(label.get("x", 0)), len(label.text or "") * 11 * 0.62
        assert x >= 0 and x + width <= 1000, (label.text, x)
        by_line.setdefault(label.get("y", ""), []).append((x, x + width))
    for spans in by_line.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans

    # Alone at the right edge, a long label ends at the edge instead of being clipped.
    edge = RunStatus(
        "r4",
        "done",
        {
            "first": NodeStatus("done", "w1", 100.0, 102.9),
            "a_node_with_a_rather_long_name_at_the_end": NodeStatus("done", "w1", 102.95, 103.0),
        },
        created_at=100.0,
        finished_at=103.0,
    )
    shown = {t.text: float(t.get("x", 0)) for t in _texts(timeline_svg(edge), "label")}
    long_name = "a_node_with_a_rather_long_name_at_the_end"
    assert long_name in shown and shown[long_name] + len(long_name) * 11 * 0.62 <= 1000


@pytest.mark.slow
def test_a_real_failed_run_and_a_real_loop(
    settings: Settings,
    two_workers: tuple[WorkerProcess, WorkerProcess],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in settings.to_env().items():
        monkeypatch.setenv(name, value)
    failing = submit_plan(FAILING, settings=settings, require_workers=True)
    with pytest.raises(NodeFailedError):
        failing.wait(timeout=60)
    out = tmp_path / "failed.svg"
    assert CliRunner().invoke(main, ["timeline", failing.id, "-o", str(out)]).exit_code == 0
    svg = out.read_text()
    assert [b.get("data-state") for b in _bars(svg) if b.get("data-node") == "rt_fail"] == [
        "failed"
    ]
    assert "rt_fail failed on purpose" in (_texts(svg, "error")[0].text or "")
    assert _marks(svg) == {"rt_sum": "not run"}

    loop = submit_plan(LOOP, input=0, settings=settings, require_workers=True)
    assert loop.wait(timeout=60) == 5
    out = tmp_path / "loop.svg"
    assert CliRunner().invoke(main, ["timeline", loop.id, "-o", str(out)]).exit_code == 0
    passes = {b.get("data-epoch") for b in _bars(out.read_text()) if b.get("data-node") == "rt_add"}
    assert len(passes) == 5, passes  # every pass, not only the last
