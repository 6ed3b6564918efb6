"""Folding a run's history into attempts: restarts, loop passes, failures."""

from __future__ import annotations

from somatize_tasks.runtime.state.history import LOST, attempts


def ev(
    at: float, node: str, state: str, worker: str = "w1", epoch: int = 0, **extra: object
) -> dict[str, object]:
    return {"at": at, "nodes": [node], "state": state, "worker": worker, "epoch": epoch, **extra}


def test_a_restart_closes_the_first_attempt_as_lost() -> None:
    tries = attempts(
        [
            ev(1, "a", "running", "dead"),
            ev(5, "a", "running", "w2"),
            ev(6, "a", "done", "w2", ended_at=6.5),
        ]
    )
    assert [(t.worker, t.state, t.start, t.end, t.number) for t in tries] == [
        ("dead", LOST, 1, 5, 1),
        ("w2", "done", 5, 6.5, 2),
    ]


def test_loop_passes_are_separate_attempts_and_failures_keep_their_error() -> None:
    tries = attempts(
        [
            ev(1, "body", "running", epoch=1),
            ev(2, "body", "done", epoch=1),
            ev(3, "body", "running", epoch=2),
            ev(4, "body", "failed", epoch=2, error="ValueError: x"),
        ]
    )
    assert [(t.epoch, t.state, t.error) for t in tries] == [
        (1, "done", None),
        (2, "failed", "ValueError: x"),
    ]


def test_a_node_still_running_has_no_end() -> None:
    (only,) = attempts([ev(1, "a", "running")])
    assert only.state == "running" and only.end is None


def test_a_fused_chain_gets_each_nodes_own_times_and_a_failed_one_drops_the_rest() -> None:
    tries = attempts(
        [
            {"at": 1, "nodes": ["a", "b"], "state": "running", "worker": "w", "epoch": 0},
            {
                "at": 3,
                "nodes": ["a"],
                "state": "done",
                "worker": "w",
                "epoch": 0,
                "started_at": 1.0,
                "ended_at": 2.0,
            },
            {
                "at": 3,
                "nodes": ["b"],
                "state": "done",
                "worker": "w",
                "epoch": 0,
                "started_at": 2.0,
                "ended_at": 3.0,
            },
            {"at": 4, "nodes": ["c", "d"], "state": "running", "worker": "w", "epoch": 0},
            {
                "at": 5,
                "nodes": ["c"],
                "state": "failed",
                "worker": "w",
                "epoch": 0,
                "error": "E: x",
            },
            {
                "at": 5,
                "nodes": ["d"],
                "state": "cancelled",
                "worker": "w",
                "epoch": 0,
                "dropped": True,
            },
        ]
    )
    assert [(t.node_id, t.start, t.end, t.state) for t in tries] == [
        ("a", 1.0, 2.0, "done"),
        ("b", 2.0, 3.0, "done"),
        ("c", 4, 5, "failed"),
    ]
