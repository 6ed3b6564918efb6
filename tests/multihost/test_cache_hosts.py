"""The content cache across hosts that share nothing but a network: what one host
computed, another serves (through S3), and status counts it."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import NodeFailedError
from somatize_tasks.runtime.producer.handle import PlanRun
from somatize_tasks.runtime.producer.submit import submit_plan
from testkit.plans import ex, seq
from tests.multihost.fleet import HostWorkers
from tests.multihost.helpers import RUN_TIMEOUT_S, hosts_of, on

pytestmark = [pytest.mark.multihost, pytest.mark.slow]


def run(settings: Settings, plan: Any, params: dict[str, Any], ops: dict[str, str]) -> PlanRun:
    return submit_plan(
        plan, input=1, params=params, ops=ops, cache="on", settings=settings, require_workers=True
    )


def test_a_value_one_host_computed_is_a_hit_on_the_others(
    mh_settings: Settings, hosts: HostWorkers
) -> None:
    log = f"/tmp/mh-cache-{uuid.uuid4().hex[:8]}"  # each host's own /tmp: nothing shared
    params = {n: {"log": log, "tag": n} for n in ("big", "size")}
    ops = {"big": "ck_big", "size": "ck_len"}
    first = run(mh_settings, seq(on("a", ex("big")), on("a", ex("size"))), params, ops)
    output = first.wait(timeout=RUN_TIMEOUT_S)
    assert first.status().cached == 0
    again = run(mh_settings, seq(on("b", ex("big")), on("c", ex("size"))), params, ops)
    assert again.wait(timeout=RUN_TIMEOUT_S) == output
    assert hosts_of(again, hosts) == {"big": "b", "size": "c"}
    status = again.status()
    assert (status.done, status.cached) == (2, 2)  # neither ran: both came from S3
    assert len(again.result("big")) == 2000  # the value itself, on the producer


def test_a_run_that_failed_at_its_last_node_reruns_only_it_on_another_host(
    mh_settings: Settings, hosts: HostWorkers
) -> None:
    log = f"/tmp/mh-cache-{uuid.uuid4().hex[:8]}"
    params = {
        "big": {"log": log, "tag": "big"},
        "flaky": {"log": log, "tag": "flaky", "marker": f"{log}/marker"},
    }
    ops = {"big": "ck_big", "flaky": "ck_flaky"}  # flaky fails once, on host b
    failed = run(mh_settings, seq(on("a", ex("big")), on("b", ex("flaky"))), params, ops)
    with pytest.raises(NodeFailedError, match="first try"):
        failed.wait(timeout=RUN_TIMEOUT_S)
    again = run(mh_settings, seq(on("c", ex("big")), on("b", ex("flaky"))), params, ops)
    assert len(again.wait(timeout=RUN_TIMEOUT_S)) == 2000
    status = again.status()
    assert (status.done, status.cached) == (2, 1)
    assert status.nodes["big"].cached and not status.nodes["flaky"].cached
    assert hosts_of(again, hosts)["big"] == "c"
