"""A host dies or loses its cable while it runs a node: the reaper the workers elect moves
the node to another host, and the run ends right there."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest

from somatize_tasks.config.settings import Settings
from somatize_tasks.runtime.producer.handle import PlanRun
from somatize_tasks.runtime.producer.submit import submit_plan
from testkit.hosts import HostCluster
from testkit.plans import MAKE_SUM, ex, remote, seq
from testkit.services import wait_for
from testkit.workers import wait_live
from tests.multihost.fleet import HostWorkers
from tests.multihost.helpers import crossings, ended_by_the_workers, hosts_of, on, running_on

pytestmark = [pytest.mark.multihost, pytest.mark.slow]

#: rt_make on a; the sleep and the sum on b or c (``spare``), so either can take them over.
PLAN = seq(on("a", ex("rt_make")), remote("spare", seq(ex("rt_sleep"), ex("rt_sum"))))
#: Heartbeats expire after 1.5 s; the reaper re-routes at its next sweep.
REROUTE_BOUND_S = 40.0


def start_and_find_victim(settings: Settings, hosts: HostWorkers) -> tuple[PlanRun, str]:
    run = submit_plan(PLAN, params={"rt_sleep": {"s": 4}}, settings=settings, require_workers=True)
    assert wait_for(lambda: running_on(run, "rt_sleep", hosts) is not None, 30), run.status()
    victim = running_on(run, "rt_sleep", hosts)
    assert victim in ("b", "c")
    return run, victim


def assert_finished_on_the_other_host(run: PlanRun, victim: str, hosts: HostWorkers) -> float:
    """The run ended right, its sleep and sum on the other spare host; how long it took."""
    state, took = ended_by_the_workers(run, REROUTE_BOUND_S)
    assert state == "done", (state, run.status())
    assert run.wait(timeout=5) == MAKE_SUM
    survivor = "c" if victim == "b" else "b"
    assert hosts_of(run, hosts) == {"rt_make": "a", "rt_sleep": survivor, "rt_sum": survivor}
    # The re-run read rt_make's value from S3 on the survivor (a's cache is not shared).
    assert ("rt_make", "rt_sleep", "a", survivor, "s3") in crossings(run, hosts)
    # And a worker's elected reaper moved it (this process only read the status).
    redispatched = re.compile(
        rf"run {run.id}: dispatched node\(s\) rt_sleep\S* again \(dead worker\(s\) "
        + re.escape(hosts[victim].worker_id)
    )
    movers = [h for h in ("a", survivor) if redispatched.search(hosts[h].log())]
    assert movers, [hosts[h].log()[-2000:] for h in ("a", survivor)]
    return took


def test_a_killed_hosts_node_moves_to_another_host(
    mh_settings: Settings,
    healthy_hosts: HostWorkers,
    host_cluster: HostCluster,
    record_property: Callable[[str, object], None],
) -> None:
    run, victim = start_and_find_victim(mh_settings, healthy_hosts)
    host_cluster.hosts[victim].kill_all()  # every process of that machine, at once
    record_property("ended_after_s", assert_finished_on_the_other_host(run, victim, healthy_hosts))


def test_a_host_whose_cable_is_pulled_loses_its_node_and_changes_nothing_when_back(
    mh_settings: Settings,
    healthy_hosts: HostWorkers,
    host_cluster: HostCluster,
    record_property: Callable[[str, object], None],
) -> None:
    run, victim = start_and_find_victim(mh_settings, healthy_hosts)
    host_cluster.cut(victim)
    try:
        took = assert_finished_on_the_other_host(run, victim, healthy_hosts)
        record_property("ended_after_s", took)
    finally:
        host_cluster.heal(victim)
    before = run.status()
    # Back on the network, the old worker heartbeats again, finishes its stale attempt
    # (the sleep it was running) and is refused: nothing recorded changes.
    wait_live(healthy_hosts[victim], mh_settings, timeout_s=30)
    time.sleep(5)
    after = run.status()
    assert after.state == "done"
    assert {n: (s.state, s.worker) for n, s in after.nodes.items()} == {
        n: (s.state, s.worker) for n, s in before.nodes.items()
    }
    assert run.wait(timeout=5) == MAKE_SUM
    assert run.result("rt_sleep") == [i * 0.5 for i in range(400)]
