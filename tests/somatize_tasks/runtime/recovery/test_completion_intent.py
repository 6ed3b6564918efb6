"""No run is lost between a completion's record and the record of what it made ready:
the completion leaves an intent in the run's outbox (in the same script), and the
reaper redoes the follow-up of one whose process died before recording it."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from somatize_tasks.config.settings import Settings
from somatize_tasks.messaging.celery_app import create_app
from somatize_tasks.runtime.engine.context import run_context
from somatize_tasks.runtime.engine.dispatch import CeleryDispatcher
from somatize_tasks.runtime.producer.submit import submit_plan
from somatize_tasks.runtime.recovery.outbox import outbox_grace, stale_intents
from somatize_tasks.runtime.state.redis_state import RedisRunState
from somatize_tasks.runtime.worker.tasks import execute_block
from testkit.nodes import run_nodes  # noqa: F401  (this process runs blocks too)
from testkit.plans import ex, par, remote, seq
from testkit.workers import WorkerProcess

pytestmark = pytest.mark.slow

JOINED = {"keys": ["rt_add", "rt_add_2"], "total": 4.0}


class Died(BaseException):
    """The process "dies": nothing after this point runs (no cleanup either)."""


@pytest.mark.parametrize(
    ("plan", "target", "expected"),
    [
        # (a) a Sequence step completes; the next step (on another worker, so the two
        # are not fused into one task) is never recorded.
        (seq(ex("rt_add"), remote("gpu", ex("rt_double"))), "rt_double", 4),
        # (b) the last branch of a Parallel completes its join (record_and_join); the
        # step after the Parallel is never recorded.
        (seq(par(ex("rt_add"), ex("rt_add_2")), ex("rt_join")), "rt_join", JOINED),
        # (c) the same when the last branch is a Sequence, joined after its record.
        (
            seq(
                par(seq(ex("rt_add_3"), remote("gpu", ex("rt_add"))), ex("rt_add_2")), ex("rt_join")
            ),
            "rt_join",
            {"keys": ["rt_add", "rt_add_2"], "total": 5.0},
        ),
    ],
)
def test_a_completion_whose_follow_up_was_never_recorded_is_followed_up(
    plan: Any,
    target: str,
    expected: Any,
    settings: Settings,
    two_workers: tuple[WorkerProcess, WorkerProcess],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Nothing goes to the workers at first: this test process runs each block instead,
    # and "dies" as it records the dispatch of ``target``, after the completion
    # that made it ready was recorded.
    queued: list[tuple[int, int, Any, str]] = []
    monkeypatch.setattr(
        CeleryDispatcher,
        "_send",
        lambda _, block, epoch, expr, task_id, producer=None: queued.append(
            (block.index, epoch, expr, task_id)
        ),
    )
    monkeypatch.setattr(
        CeleryDispatcher,
        "_send_batch",
        lambda _, batch, task_id, producer: queued.extend(
            (b.index, e, x, task_id) for b, e, x in batch
        ),
    )
    recording = RedisRunState.record_dispatch

    def record_dispatch(state: RedisRunState, nodes: list[str], *args: Any, **kw: Any) -> None:
        if target in nodes:
            raise Died
        recording(state, nodes, *args, **kw)

    monkeypatch.setattr(RedisRunState, "record_dispatch", record_dispatch)
    run = submit_plan(plan, input=1, settings=settings, require_workers=True)
    app = create_app(settings)
    state = run_context(app, settings).state(run.id)
    program = run_context(app, settings).program(run.id)
    assert program is not None
    with pytest.raises(Died):
        while queued:
            bid, epoch, expr, task_id = queued.pop(0)
            worker = run_context(app, settings, program.blocks[bid].worker_id)
            execute_block(worker, run.id, bid, epoch, expr, task_id)
    monkeypatch.undo()
    left = set(state.intents())
    assert left, "the completion left its intent"
    started = time.monotonic()
    assert run.wait(timeout=40) == expected  # wait() takes part in repairs
    assert time.monotonic() - started >= outbox_grace(settings) - 1
    assert not left & set(state.intents()), "the reaper claimed the intent it redid"


def test_an_intent_whose_task_is_still_held_is_slow_not_stale(settings: Settings) -> None:
    # Its process is alive (its worker reports the task) and will record the
    # follow-up itself; a redo would race it. Once the worker stops holding it (the
    # process died), never reported, or is dead itself, the intent is redone.
    context = run_context(create_app(settings), settings, "test")
    state = context.state(uuid.uuid4().hex[:12])
    entry = {"at": time.time() - 60, "w": "w1", "t": "task-1", "o": None}
    state.client.hset(state.outbox, "c:3:0", json.dumps(entry))
    try:
        holding = {"w1": frozenset({"task-1"})}
        assert stale_intents(state, 5.0, lambda workers: holding, {"w1"}) == {}
        assert (3, 0) in stale_intents(state, 5.0, lambda ws: {"w1": frozenset()}, {"w1"})
        assert (3, 0) in stale_intents(state, 5.0, lambda workers: {"w1": None}, {"w1"})
        # A dead worker's last report still names the task it died running.
        assert (3, 0) in stale_intents(state, 5.0, lambda workers: holding, set())
    finally:
        state.client.delete(state.outbox)
