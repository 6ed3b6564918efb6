"""No run is lost between a completion's record and the record of what it made ready:
the completion leaves an intent in the run's outbox (in the same script), and the
reaper redoes the follow-up of one whose process died before recording it."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from somatize_tasks.celery_app import create_app
from somatize_tasks.runtime.context import run_context
from somatize_tasks.runtime.dispatch import CeleryDispatcher
from somatize_tasks.runtime.outbox import outbox_grace
from somatize_tasks.runtime.redis_state import RedisRunState
from somatize_tasks.runtime.submit import submit_plan
from somatize_tasks.runtime.tasks import execute_block
from somatize_tasks.settings import Settings
from tests.conftest import WorkerProcess
from tests.runtime import run_nodes  # noqa: F401  (this process runs blocks too)
from tests.runtime.plans import ex, par, remote, seq

pytestmark = pytest.mark.slow


class Died(BaseException):
    """The process "dies": nothing after this point runs (no cleanup either)."""


def _die(*args: Any, **kwargs: Any) -> None:
    raise Died


@pytest.mark.parametrize(
    ("plan", "expected"),
    [
        # (a) a Sequence step completes; the next step (on another worker, so the two
        # are not fused into one task) was never recorded.
        (seq(ex("rt_add"), remote("gpu", ex("rt_double"))), 4),
        # (b) the last branch of a Parallel completes its join; the step after it
        # was never recorded.
        (seq(par(ex("rt_add"), ex("rt_add_2")), ex("rt_join")),
         {"keys": ["rt_add", "rt_add_2"], "total": 4.0}),
    ],
)  # fmt: skip
def test_a_completion_whose_follow_up_was_never_recorded_is_followed_up(
    plan: Any, expected: Any, settings: Settings,
    two_workers: tuple[WorkerProcess, WorkerProcess], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    # The first wave is recorded but not sent: this test process runs it instead.
    monkeypatch.setattr(CeleryDispatcher, "_send", lambda *args, **kwargs: None)
    monkeypatch.setattr(CeleryDispatcher, "_send_batch", lambda *args, **kwargs: None)
    monkeypatch.setattr(RedisRunState, "sent", lambda *args, **kwargs: None)
    run = submit_plan(plan, input=1, settings=settings, require_workers=True)
    monkeypatch.undo()
    app = create_app(settings)
    state = run_context(app, settings).state(run.id)
    first_wave = sorted({
        (status["block"], status["epoch"], status["task_id"], status["worker"])
        for status in (json.loads(v) for v in state.client.hvals(state.nodes))
        if status.get("state") == "pending"
    })  # fmt: skip
    *others, last = first_wave
    for bid, epoch, task_id, worker in others:  # earlier branches complete normally
        execute_block(run_context(app, settings, worker), run.id, bid, epoch,
                      state.load_input(bid, epoch), task_id)  # fmt: skip
    # The last one records its completion and its process dies before recording the
    # dispatch that follows it.
    monkeypatch.setattr(RedisRunState, "record_dispatch", _die)
    bid, epoch, task_id, worker = last
    with pytest.raises(Died):
        execute_block(run_context(app, settings, worker), run.id, bid, epoch,
                      state.load_input(bid, epoch), task_id)  # fmt: skip
    monkeypatch.undo()
    left = set(state.intents())
    assert left, "the completion left its intent"
    started = time.monotonic()
    assert run.wait(timeout=40) == expected  # wait() takes part in repairs
    assert time.monotonic() - started >= outbox_grace(settings) - 1
    assert not left & set(state.intents()), "the reaper claimed the intent it redid"
