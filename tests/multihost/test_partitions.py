"""Partitions: a host cut off for some seconds then healed, and a host that reaches Redis
but neither its peers nor S3. Each run ends right or with a clear error within a bound."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import (
    RunDeadlineError,
    RunEndedByReaperError,
    RunError,
    RunTimeoutError,
)
from somatize_tasks.runtime.producer.handle import PlanRun
from somatize_tasks.runtime.producer.submit import submit_plan
from testkit.hosts import HostCluster
from testkit.plans import MAKE_SUM, ex, remote, seq
from testkit.services import wait_for
from tests.multihost.fleet import NODES, HostWorkers
from tests.multihost.helpers import on, running_on

pytestmark = [pytest.mark.multihost, pytest.mark.slow]

Record = Callable[[str, object], None]


def outcome(run: PlanRun, bound_s: float) -> tuple[object, float]:
    """The run's output or its error, and how long it took to end (a hang: RunTimeoutError)."""
    began = time.monotonic()
    try:
        value: object = run.wait(timeout=bound_s)
    except RunError as exc:
        value = exc
    return value, time.monotonic() - began


def test_a_host_cut_for_seconds_mid_node_then_healed_ends_right(
    mh_settings: Settings,
    healthy_hosts: HostWorkers,
    host_cluster: HostCluster,
    record_property: Record,
) -> None:
    plan = seq(on("a", ex("rt_make")), remote("spare", seq(ex("rt_sleep"), ex("rt_sum"))))
    run = submit_plan(
        plan, params={"rt_sleep": {"s": 3}}, settings=mh_settings, require_workers=True
    )
    assert wait_for(lambda: running_on(run, "rt_sleep", healthy_hosts) is not None, 30)
    victim = running_on(run, "rt_sleep", healthy_hosts)
    assert victim is not None
    host_cluster.cut(victim)
    time.sleep(8)  # past the heartbeat TTL (1.5 s): the node moves to the other spare
    host_cluster.heal(victim)
    value, took = outcome(run, 60)
    record_property("ended_after_heal_s", round(took, 2))
    assert value == MAKE_SUM
    assert run.status().state == "done"


def test_a_pinned_node_on_a_cut_host_fails_the_run_naming_it_in_time(
    mh_settings: Settings,
    healthy_hosts: HostWorkers,
    host_cluster: HostCluster,
    record_property: Record,
) -> None:
    plan = seq(on("b", ex("rt_make")), on("a", ex("rt_sleep")), on("c", ex("rt_sum")))
    run = submit_plan(
        plan, params={"rt_sleep": {"s": 3}}, settings=mh_settings, require_workers=True
    )
    assert wait_for(lambda: running_on(run, "rt_sleep", healthy_hosts) == "a", 30)
    host_cluster.cut("a")
    try:
        # heartbeat TTL (1.5 s) + reroute grace (3 s) + sweeps; well inside 30 s.
        value, took = outcome(run, 30)
    finally:
        host_cluster.heal("a")
    record_property("ended_after_cut_s", round(took, 2))
    assert isinstance(value, RunEndedByReaperError), value
    message = str(value)
    assert "rt_sleep" in message and healthy_hosts["a"].worker_id in message
    assert "no live worker can take it" in message


def test_a_host_reaching_redis_but_not_s3_ends_the_run_by_its_deadline(
    mh_settings: Settings,
    healthy_hosts: HostWorkers,
    host_cluster: HostCluster,
    record_property: Record,
) -> None:
    host_cluster.isolate("b", peers=True, s3=True, redis=False)  # silent drops: a dead switch
    run = submit_plan(
        seq(on("a", ex("rt_make")), on("b", ex("rt_sum"))),
        settings=mh_settings,
        require_workers=True,
        deadline_s=5,
    )
    value, took = outcome(run, 40)
    record_property("ended_after_s", round(took, 2))
    assert isinstance(value, RunDeadlineError), value
    assert "rt_sum" in str(value)
    assert healthy_hosts.live("b")  # b kept its heartbeat all along: Redis was reachable


def test_a_host_refused_by_s3_fails_the_run_naming_the_node(
    mh_settings: Settings,
    healthy_hosts: HostWorkers,
    host_cluster: HostCluster,
    record_property: Record,
) -> None:
    host_cluster.isolate("b", peers=True, s3=True, redis=False, refuse=True)  # fails at once
    run = submit_plan(
        seq(on("a", ex("rt_make")), on("b", ex("rt_sum"))),
        settings=mh_settings,
        require_workers=True,
    )
    value, took = outcome(run, 30)
    record_property("ended_after_s", round(took, 2))
    assert not isinstance(value, RunTimeoutError), value  # a hang
    assert isinstance(value, RunError), value
    message = str(value)
    assert "rt_sum" in message and healthy_hosts["b"].worker_id in message, message
    assert host_cluster.s3.url in message, message  # the store's own error, naming it


def test_a_host_whose_s3_packets_vanish_ends_the_run_with_a_clear_error(
    mh_settings: Settings,
    healthy_hosts: HostWorkers,
    host_cluster: HostCluster,
    record_property: Record,
) -> None:
    # A worker of its own on b: no download retries, so one try fails in ~16 s (three
    # 5 s connect timeouts), longer than the session's transfer_stall_s (10 s).
    solo = host_cluster.start_worker(
        "b",
        name="bsolo",
        tags="solo",
        nodes=NODES,
        settings=mh_settings.model_copy(update={"transfer_max_retries": 0}),
    )
    try:
        host_cluster.isolate("b", peers=True, s3=True, redis=False)
        run = submit_plan(
            seq(on("a", ex("rt_make")), remote("solo", ex("rt_sum"))),
            settings=mh_settings,
            require_workers=True,
        )
        # Two waits of transfer_stall_s (10 s) in vain, then the reaper ends the run
        # (max_transfer_stalls=2): about 20-30 s, never a hang.
        value, took = outcome(run, 60)
        record_property("outcome", repr(value))
        record_property("ended_after_s", round(took, 2))
        assert not isinstance(value, RunTimeoutError), value  # a hang
        assert isinstance(value, RunError) and "rt_sum" in str(value), value
        assert "transfers never arrived" in str(value), value
    finally:
        solo.stop(timeout_s=2.0)
