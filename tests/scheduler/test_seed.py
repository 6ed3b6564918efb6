"""The Rust seed's five unit tests, ported (their intent, with sharper assertions)."""

from __future__ import annotations

from scheduler import WorkerInfo, schedule
from tests.scheduler.helpers import ex, plan


def test_sequential_same_worker(seed_workers: list[WorkerInfo]) -> None:
    result = schedule(
        plan({"Sequence": [ex("normalize"), ex("select"), ex("classify")]}), seed_workers
    )
    assert [a.node_id for a in result.assignments] == ["normalize", "select", "classify"]
    assert len({a.worker_id for a in result.assignments}) == 1
    assert result.data_transfers == []


def test_parallel_distributes(seed_workers: list[WorkerInfo]) -> None:
    result = schedule(plan({"Parallel": [ex("train_svm"), ex("train_knn")]}), seed_workers)
    assert len(result.assignments) == 2
    assert result.assignments[0].worker_id != result.assignments[1].worker_id


def test_no_workers_warns() -> None:
    result = schedule(plan(ex("test")), [])
    assert result.assignments == []
    assert result.warnings == ["No workers available — will execute locally"]


def test_sequence_then_parallel(seed_workers: list[WorkerInfo]) -> None:
    wire = {
        "Sequence": [
            ex("load"),
            ex("normalize"),
            {"Parallel": [ex("train_a"), ex("train_b")]},
        ]
    }
    result = schedule(plan(wire), seed_workers)
    rows = result.assignments
    assert [a.node_id for a in rows] == ["load", "normalize", "train_a", "train_b"]
    assert rows[0].worker_id == rows[1].worker_id
    assert rows[2].worker_id != rows[3].worker_id


def test_data_transfer_on_split(seed_workers: list[WorkerInfo]) -> None:
    wire = {"Sequence": [ex("preprocess"), {"Parallel": [ex("branch_a"), ex("branch_b")]}]}
    result = schedule(plan(wire), seed_workers)
    home = result.assignments[0].worker_id
    away = [a for a in result.assignments[1:] if a.worker_id != home]
    # Exactly one branch left preprocess's worker, and exactly its edge moves data.
    assert len(away) == 1
    assert [
        (t.from_node, t.to_node, t.from_worker, t.to_worker, t.transfer_type)
        for t in result.data_transfers
    ] == [("preprocess", away[0].node_id, home, away[0].worker_id, "s3")]
