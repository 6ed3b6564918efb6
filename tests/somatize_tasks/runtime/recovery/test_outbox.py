"""No run is lost in the record-then-publish window: what a dispatcher recorded but
died before publishing is published again by the reaper (the outbox, or the orphan
rule: a pending node whose live worker holds no message for it)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from somatize_tasks.config.settings import Settings
from somatize_tasks.runtime.engine.dispatch import CeleryDispatcher
from somatize_tasks.runtime.producer.submit import submit_plan
from somatize_tasks.runtime.recovery.outbox import outbox_grace
from somatize_tasks.runtime.state.redis_state import RedisRunState
from testkit.plans import ex, par, seq
from testkit.workers import WorkerProcess

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "plan", [seq(ex("rt_add"), ex("rt_double")), par(*[ex(f"rt_add_{i}") for i in range(2, 12)])]
)
def test_blocks_recorded_but_never_published_are_published_again(
    plan: Any,
    settings: Settings,
    two_workers: tuple[WorkerProcess, WorkerProcess],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The producer "dies" right after recording its first wave: nothing goes out, and
    # nothing confirms that it did.
    monkeypatch.setattr(CeleryDispatcher, "_send", lambda *args, **kwargs: None)
    monkeypatch.setattr(CeleryDispatcher, "_send_batch", lambda *args, **kwargs: None)
    monkeypatch.setattr(RedisRunState, "sent", lambda *args, **kwargs: None)
    run = submit_plan(plan, input=1, settings=settings, require_workers=True)
    monkeypatch.undo()
    assert run._state.unsent(), "the recorded dispatch waits in the outbox"
    started = time.monotonic()
    output = run.wait(timeout=60)  # wait() takes part in repairs
    assert output == (4 if "Sequence" in plan else {f"rt_add_{i}": 2 for i in range(2, 12)})
    # Published again by whichever rule sees it first: the outbox (after outbox_grace)
    # or the orphan rule (a pending node its live worker does not hold: two TTLs).
    first_rule_s = min(outbox_grace(settings), 2 * settings.heartbeat_ttl_s)
    assert time.monotonic() - started >= first_rule_s - 1
    assert not run._state.unsent()
