"""What the multi-host tests share: pinning a plan to a host, and reading where things ran."""

from __future__ import annotations

import time
from typing import Any

from somatize_tasks.runtime.producer.handle import PlanRun
from somatize_tasks.runtime.state.run_state import FINAL_STATES
from testkit.plans import remote
from tests.multihost.fleet import HostWorkers

#: How long a healthy run may take here (a busy 2-core machine): a hang fails, slowness not.
RUN_TIMEOUT_S = 60


def on(host: str, plan: Any) -> dict[str, Any]:
    """``plan`` pinned to ``host`` by its ``on-<host>`` tag."""
    return remote(f"on-{host}", plan)


def hosts_of(run: PlanRun, hosts: HostWorkers) -> dict[str, str | None]:
    """Node id -> the host whose worker ran it."""
    return {n: hosts.host_of(s.worker) for n, s in run.status().nodes.items()}


def crossings(run: PlanRun, hosts: HostWorkers) -> set[tuple[str, str, str, str, str]]:
    """(from node, to node, from host, to host, how) of every value that moved between
    workers in the run (the producer's input excluded)."""
    return {
        (
            t["from_node"],
            t["to_node"],
            str(hosts.host_of(t["from_worker"])),
            str(hosts.host_of(t["to_worker"])),
            t["transfer_type"],
        )
        for t in run.status().transfers
        if t["from_node"] != "input"
    }


def ended_by_the_workers(run: PlanRun, timeout_s: float) -> tuple[str, float]:
    """Poll the run's status (which repairs nothing, unlike ``wait``) until it ends, so
    whatever re-routed its work was the reaper the workers elected. (state, seconds)."""
    began = time.monotonic()
    deadline = began + timeout_s
    state = run.status().state
    while state not in FINAL_STATES and time.monotonic() < deadline:
        time.sleep(0.2)
        state = run.status().state
    return state, time.monotonic() - began


def running_on(run: PlanRun, node_id: str, hosts: HostWorkers) -> str | None:
    """The host running ``node_id`` now, if it is running."""
    node = run.status().nodes[node_id]
    return hosts.host_of(node.worker) if node.state == "running" else None
