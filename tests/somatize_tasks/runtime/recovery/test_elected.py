"""The elected reaper: one leader at a time, takeover on lapse, work only when it matters."""

from __future__ import annotations

import time
import uuid
from typing import Any

from scheduler import WorkerInfo
from somatize_tasks.config.settings import Settings
from somatize_tasks.messaging.celery_app import create_app
from somatize_tasks.runtime.engine.context import run_context
from somatize_tasks.runtime.recovery.elected import ReaperLoop
from somatize_tasks.workers.registry import Registry
from testkit.services import wait_for


class CountingReaper:
    """Stands in for :class:`Reaper`: counts sweeps."""

    def __init__(self) -> None:
        self.sweeps = 0

    def sweep(self) -> list[str]:
        self.sweeps += 1
        return []


def loops(settings: Settings, count: int) -> tuple[list[ReaperLoop], list[CountingReaper]]:
    reapers = [CountingReaper() for _ in range(count)]
    made = []
    for index, reaper in enumerate(reapers):
        context = run_context(create_app(settings), settings, f"elect-{index}")
        made.append(ReaperLoop(context, reaper, None))  # type: ignore[arg-type]
    return made, reapers


def test_one_leader_a_lapsed_lease_is_taken_over_and_idle_means_no_sweeps(
    settings: Settings,
) -> None:
    own = settings.model_copy(
        update={
            "key_prefix": f"{settings.key_prefix}:el{uuid.uuid4().hex[:6]}",
            "heartbeat_interval_s": 0.2,
            "heartbeat_ttl_s": 0.6,
        }
    )
    (first, second, third), reapers = loops(own, 3)
    for loop in (first, second, third):
        loop.tick()
    assert [loop.leading for loop in (first, second, third)] == [True, False, False]
    for _ in range(3):  # idle cluster: the leader renews, nobody sweeps
        for loop in (first, second, third):
            loop.tick()
        time.sleep(0.1)
    assert first.leading and sum(r.sweeps for r in reapers) == 0

    # The leader stops ticking (its worker died): another takes over once it lapses.
    assert wait_for(lambda: (second.tick(), second.leading)[1], 3, 0.1)
    first.tick()
    assert not first.leading

    # An active run: the new leader sweeps; a heartbeat expiring wakes it at once.
    client: Any = second.client
    client.sadd(second.keys.active_runs, "r1")
    registry = Registry.from_settings(own, second.client)
    registry.heartbeat(WorkerInfo(id="doomed", name="doomed"))
    second.sweep_every_s = 60.0  # so only an expiry can wake it below
    second.tick()
    swept = reapers[1].sweeps
    assert swept == 1  # it had just taken over
    second.tick()
    assert reapers[1].sweeps == swept  # nothing new, not yet due
    time.sleep(0.7)  # "doomed" expires
    second.tick()
    assert reapers[1].sweeps == swept + 1
    second.release()
    third.tick()
    assert third.leading
    client.delete(second.keys.active_runs, second.keys.reaper_lease)
