"""A block whose transfers never come is dispatched again a bounded number of times,
then its run ends naming the node and worker (the multi-host partition test runs it
end to end: tests/multihost/test_partitions.py)."""

from __future__ import annotations

from somatize_tasks.runtime.recovery.reaper_checks import stalled_too_often

NODES = {
    "make": {"state": "done", "block": 0, "epoch": 0, "worker": "a"},
    "use": {"state": "pending", "block": 1, "epoch": 0, "worker": "b", "waiting_for": "transfers"},
}


def test_below_the_limit_the_block_just_goes_out_again() -> None:
    assert stalled_too_often(NODES, (1, 0), times=2, limit=3, stall_s=60) is None


def test_at_the_limit_the_run_fails_naming_node_worker_and_what_to_check() -> None:
    failure = stalled_too_often(NODES, (1, 0), times=3, limit=3, stall_s=60)
    assert failure is not None
    assert (failure.node_id, failure.worker_id, failure.kind) == ("use", "b", "TransferStalled")
    assert "use" in failure.message and "'b'" in failure.message
    assert "3 times 60 s" in failure.message and "object store" in failure.message
