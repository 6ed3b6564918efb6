"""A block's transfers counted in: once each, and the last one publishes the block,
even when its reply was lost with Redis and the arrival is done again."""

from __future__ import annotations

import uuid

from somatize_tasks.config.connections import redis_client
from somatize_tasks.config.settings import Settings
from somatize_tasks.runtime.state.redis_state import RedisRunState
from tests.somatize_tasks.runtime.state.test_starts import running_state

RECORD = '{"from_node": "a"}'


def waiting_block(settings: Settings, missing: int) -> RedisRunState:
    """Block 1 (node ``b``), published as task ``t1`` and waiting for ``missing`` inputs."""
    prefix = f"{settings.key_prefix}:ar{uuid.uuid4().hex[:4]}"
    state = running_state(redis_client(settings), prefix)
    status = {
        "state": "pending",
        "worker": "w2",
        "block": 1,
        "epoch": 0,
        "task_id": "t1",
        "waiting_for": "transfers",
    }
    state.record_dispatch(["b"], 1, 0, {"ref": {}}, status, missing=missing)
    return state


def test_each_input_counts_once_and_the_last_one_gets_the_version(settings: Settings) -> None:
    state = waiting_block(settings, missing=2)
    assert state.transfer_arrived("b", "t1", 1, 0, "a#0", RECORD, "arrival-a") is None
    assert state.transfer_arrived("b", "t1", 1, 0, "a#0", RECORD, "arrival-a") is None
    assert state.transfer_arrived("b", "t1", 1, 0, "c#0", RECORD, "arrival-c") == 3
    assert state.client.llen(state.transfers) == 2, "each arrival logged once"


def test_the_last_arrival_done_again_still_gets_the_version(settings: Settings) -> None:
    # Its first reply was lost (Redis went away after running the script): a redo
    # by the same arrival must publish the block, or nothing ever would.
    state = waiting_block(settings, missing=1)
    assert state.transfer_arrived("b", "t1", 1, 0, "a#0", RECORD, "arrival-a") == 3
    assert state.transfer_arrived("b", "t1", 1, 0, "a#0", RECORD, "arrival-a") == 3
    # Another delivery of the same input (a stale copy) publishes nothing.
    assert state.transfer_arrived("b", "t1", 1, 0, "a#0", RECORD, "copy") is None
    assert state.client.llen(state.transfers) == 1


def test_once_published_a_redo_publishes_nothing(settings: Settings) -> None:
    state = waiting_block(settings, missing=1)
    assert state.transfer_arrived("b", "t1", 1, 0, "a#0", RECORD, "arrival-a") == 3
    published = {"state": "pending", "worker": "w2", "block": 1, "epoch": 0, "task_id": "t1"}
    state.set_status(["b"], published)
    assert state.transfer_arrived("b", "t1", 1, 0, "a#0", RECORD, "arrival-a") is None
