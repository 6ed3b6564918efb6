"""A very wide Parallel: ``submit_plan`` returns in seconds, and stops publishing
once the run has ended (issue #13: it blocked 21 s on 10,000 branches, 264 s on
100,000, and published on after the run had failed)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from somatize_tasks.config.settings import Settings
from somatize_tasks.messaging.celery_app import create_app
from somatize_tasks.runtime.engine.context import PRODUCER, run_context
from somatize_tasks.runtime.producer.handle import PlanRun
from somatize_tasks.runtime.producer.submit import submit_plan
from testkit.services import wait_for

BRANCHES = 30_000


def test_a_run_that_ends_while_publishing_stops_its_publishing(
    two_workers: Any, settings: Settings
) -> None:
    context = run_context(create_app(settings), settings, PRODUCER)
    before = set(context.redis.smembers(context.keys.active_runs))
    plan = {"Parallel": [{"Execute": {"node_id": f"rt_add_{i}"}} for i in range(BRANCHES)]}
    took: list[float] = []

    def submit() -> None:
        started = time.perf_counter()
        submit_plan(plan, input=1.0, settings=settings, require_workers=True)
        took.append(time.perf_counter() - started)

    producer = threading.Thread(target=submit)
    producer.start()
    new: set[bytes] = set()
    assert wait_for(
        lambda: new.update(set(context.redis.smembers(context.keys.active_runs)) - before) or new,
        60,
        0.01,
    )
    run_id = next(iter(new)).decode()
    assert PlanRun.attach(run_id, settings).cancel()  # the run ends while it is published
    producer.join(60)
    state = context.state(run_id)
    # Blocks are recorded and published a slice at a time: what was recorded and never
    # sent waits in the outbox, what was never reached was not even recorded.
    published = context.redis.hlen(state.nodes) - len(state.unsent())
    print(
        f"\n{BRANCHES} branches: submit_plan {took[0]:.2f} s, {published} blocks "
        f"published, load {os.getloadavg()[0]:.2f}"
    )
    assert took and took[0] < 60
    assert published < BRANCHES // 2  # at most a few batches went out after the cancel
