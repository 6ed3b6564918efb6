"""What a failed run's error says: the node and worker when a node raised, and
never a made-up ``node 'None'`` when the run ended for another reason."""

from __future__ import annotations

from somatize_tasks.errors import NodeFailedError
from somatize_tasks.runtime.producer.handle import ERRORS_BY_KIND


def test_a_node_that_raised_is_named_with_its_worker_and_traceback() -> None:
    detail = {
        "node_id": "train",
        "worker_id": "gpu-1",
        "type": "ValueError",
        "message": "bad rows",
        "traceback": "Traceback ...",
    }
    text = str(NodeFailedError("r1", detail))
    assert "node 'train' on worker 'gpu-1' raised ValueError: bad rows" in text
    assert "Remote traceback:\nTraceback ..." in text


def test_a_failure_with_no_node_names_none() -> None:
    detail = {
        "node_id": None,
        "worker_id": "w1,w2",
        "type": "WorkerLost",
        "traceback": "",
        "message": "workers w1, w2 are gone (waited 30 s for them to come back)",
    }
    for kind in (NodeFailedError, ERRORS_BY_KIND["WorkerLost"]):
        text = str(kind("r1", detail))
        assert "None" not in text and "Remote traceback" not in text
        assert "workers w1, w2 are gone" in text
