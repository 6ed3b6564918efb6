"""Reservations: runs placed at once spread over idle workers, and slots come back."""

from __future__ import annotations

import threading
import uuid
from collections import Counter

import pytest

from scheduler import DistributionPlan, ExecutionPlan, WorkerInfo, schedule
from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import SomatizeError
from somatize_tasks.messaging.celery_app import create_app
from somatize_tasks.runtime.engine.context import reservations_of, run_context
from somatize_tasks.runtime.producer.submit import submit_plan
from somatize_tasks.workers.registry import Registry
from somatize_tasks.workers.reservations import slots_per_worker
from testkit.plans import ex, par, seq

PLAN = seq(ex("rt_sleep"), ex("rt_sleep_2"))


def test_runs_submitted_at_once_spread_and_queue_evenly(settings: Settings) -> None:
    # Fake idle workers (heartbeats only): placement is what is under test.
    prefix = f"{settings.key_prefix}:rs{uuid.uuid4().hex[:6]}"
    own = settings.model_copy(update={"key_prefix": prefix, "heartbeat_ttl_s": 600.0})
    registry = Registry.from_settings(own)
    for name in ("w1", "w2", "w3"):
        registry.heartbeat(WorkerInfo(id=name, name=name, max_concurrent=1))
    placed: Counter[str] = Counter()
    runs = []
    lock = threading.Lock()

    def submit() -> None:
        run = submit_plan(PLAN, settings=own, require_workers=True)
        with lock:
            placed[run.distribution.assignments[0].worker_id] += 1
            runs.append(run)

    threads = [threading.Thread(target=submit) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert placed == {"w1": 2, "w2": 2, "w3": 2}

    context = run_context(create_app(own), own, "test")
    reservations = reservations_of(context)
    assert reservations.by_worker() == {"w1": 2, "w2": 2, "w3": 2}
    reservations.release_one("w1", runs[0].id)
    for run in runs[1:3]:
        run.cancel()
    assert reservations.prune() == 2
    assert sum(reservations.by_worker().values()) in (3, 4)  # minus one start, two ended
    for run in runs:
        run.cancel()


def test_slots_count_the_busiest_phase_capped_by_the_limit() -> None:
    plan = ExecutionPlan.model_validate(seq(ex("a"), par(ex("b"), ex("c"), ex("d"))))
    workers = [
        WorkerInfo(id="w1", name="w1", max_concurrent=2),
        WorkerInfo(id="w2", name="w2", max_concurrent=8),
    ]
    distribution: DistributionPlan = schedule(plan, workers)
    slots = slots_per_worker(distribution, {w.id: w for w in workers})
    assert sum(slots.values()) >= 2 and all(1 <= n <= 8 for n in slots.values())
    assert slots.get("w1", 0) <= 2


def test_a_run_that_could_not_be_submitted_gives_its_slots_back(settings: Settings) -> None:
    prefix = f"{settings.key_prefix}:rs{uuid.uuid4().hex[:6]}"
    own = settings.model_copy(
        update={
            "key_prefix": prefix,
            "heartbeat_ttl_s": 600.0,
            "s3_endpoint_url": "http://127.0.0.1:9",
            "transfer_max_retries": 0,
        }
    )
    Registry.from_settings(own).heartbeat(WorkerInfo(id="w1", name="w1", max_concurrent=2))
    with pytest.raises(SomatizeError):  # its large input cannot reach the (dead) store
        submit_plan(ex("rt_size"), input=list(range(50_000)), settings=own, require_workers=True)
    reservations = reservations_of(run_context(create_app(own), own, "test"))
    assert reservations.by_worker() == {}


def test_a_block_that_starts_gives_back_one_slot_in_the_same_trip(settings: Settings) -> None:
    prefix = f"{settings.key_prefix}:rs{uuid.uuid4().hex[:6]}"
    own = settings.model_copy(update={"key_prefix": prefix})
    context = run_context(create_app(own), own, "test")
    reservations = reservations_of(context)
    run_id = uuid.uuid4().hex[:12]
    reservations._reserve(keys=reservations.fields, args=[60_000, f"w1|{run_id}", 2])
    state = context.state(run_id)
    state.client.hset(state.meta, mapping={"status": "running", "version": 0})
    assert state.mark_running(["a"], "w1", 0, 0, "t1", release_slot=True) == 0
    assert reservations.by_worker() == {"w1": 1}
    state.client.hset(state.nodes, "b", '{"state": "pending", "task_id": "t9"}')
    assert state.mark_running(["b"], "w1", 1, 0, "t1", release_slot=True) is None  # stale
    assert reservations.by_worker() == {"w1": 1}  # a refused start keeps the slot
    assert state.mark_running(["c"], "w1", 2, 0, "t3", release_slot=True) == 0
    assert state.mark_running(["d"], "w1", 3, 0, "t4", release_slot=True) == 0  # none left
    assert reservations.by_worker() == {}
    state.client.delete(*state.all_keys(), *reservations.fields)
