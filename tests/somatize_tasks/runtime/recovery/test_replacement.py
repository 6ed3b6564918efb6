"""Re-placing a dead worker's nodes: busy survivors still take them (they queue)."""

from __future__ import annotations

import pytest

from scheduler import RemoteTarget, WorkerInfo
from somatize_tasks.errors import StrandedError
from somatize_tasks.runtime.recovery.replacement import new_home


def _worker(worker_id: str, tags: list[str], active: int, slots: int = 2) -> WorkerInfo:
    return WorkerInfo(
        id=worker_id, name=worker_id, tags=tags, active_jobs=active, max_concurrent=slots
    )


def test_a_dead_workers_node_queues_on_a_busy_survivor_instead_of_stranding() -> None:
    live = {"b": _worker("b", ["cpu"], active=2), "c": _worker("c", ["cpu"], active=5, slots=4)}
    worker_id, _ = new_home("n1", "a", None, live)
    assert worker_id in live
    tagged, _ = new_home("n1", "a", RemoteTarget.model_validate({"Tag": "cpu"}), live)
    assert tagged in live


def test_a_free_survivor_is_preferred_and_a_missing_tag_still_strands() -> None:
    live = {"b": _worker("b", ["cpu"], active=2), "c": _worker("c", ["cpu"], active=0)}
    assert new_home("n1", "a", None, live)[0] == "c"
    with pytest.raises(StrandedError, match="gpu"):
        new_home("n1", "a", RemoteTarget.model_validate({"Tag": "gpu"}), live)
    with pytest.raises(StrandedError, match="no live worker left"):
        new_home("n1", "a", None, {})
