"""A fused chain (several nodes run as one task) reports exactly as the same plan run
unfused: each node's own state, start and end, the failing node named with its own
error, and the same counts in status, progress, dashboard, timeline and Soma export."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from redis import Redis

from somatize_tasks.config.keys import RedisKeys
from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import RunError
from somatize_tasks.observe.dashboard import list_runs
from somatize_tasks.observe.run_record import read_run
from somatize_tasks.observe.soma_export import events as soma_events
from somatize_tasks.runtime.producer.handle import PlanRun
from somatize_tasks.runtime.producer.local import run_local
from somatize_tasks.runtime.producer.submit import submit_plan
from somatize_tasks.runtime.state.history import attempts
from testkit.nodes import run_nodes  # noqa: F401  (registers the catalog)
from testkit.plans import ex, remote, seq
from testkit.workers import WorkerProcess, wait_idle

UNKNOWN = seq(ex("rt_make"), ex("no_such_node"), ex("rt_sum"))
RAISES = seq(ex("rt_make"), ex("rt_scale"), ex("rt_fail"), ex("rt_sum"))
SUCCEEDS = seq(ex("rt_make"), ex("rt_scale"), ex("rt_size"), ex("rt_add"), ex("rt_double"))
EXPECTED = {
    "unknown": (
        UNKNOWN,
        "no_such_node",
        "UnknownNodeError",
        {"rt_make": "done", "no_such_node": "failed", "rt_sum": "pending"},
    ),
    "raises": (
        RAISES,
        "rt_fail",
        "ValueError",
        {"rt_make": "done", "rt_scale": "done", "rt_fail": "failed", "rt_sum": "pending"},
    ),
    "succeeds": (
        SUCCEEDS,
        None,
        None,
        dict.fromkeys(["rt_make", "rt_scale", "rt_size", "rt_add", "rt_double"], "done"),
    ),
}


def local_report(plan: Any, fuse: bool) -> dict[str, Any]:
    result = run_local(plan, fuse=fuse)
    error = result.error or {}
    nodes = {n: result.nodes.get(n, {}).get("state", "pending") for n in _ids(plan)}
    _check_times(plan, {n: result.nodes.get(n, {}) for n in _ids(plan)})
    return {
        "status": result.status,
        "error": (error.get("node_id"), error.get("type"), error.get("message")),
        "nodes": nodes,
    }


def _ids(plan: Any) -> list[str]:
    return [step["Execute"]["node_id"] for step in plan["Sequence"]]


def _check_times(plan: Any, nodes: dict[str, dict[str, Any]]) -> None:
    """Every node that ran has its own [start, end], after the one before it ended."""
    previous_end = 0.0
    for node_id in _ids(plan):
        node = nodes[node_id]
        if node.get("state") not in ("done", "failed"):
            continue
        start, end = node.get("started_at"), node.get("ended_at")
        assert start is not None and end is not None, (node_id, node)
        assert previous_end <= start <= end, (node_id, previous_end, start, end)
        previous_end = end


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_in_process_a_fused_chain_reports_as_the_unfused_plan(case: str) -> None:
    plan, bad, kind, states = EXPECTED[case]
    fused, unfused = local_report(plan, True), local_report(plan, False)
    assert fused == unfused
    assert fused["nodes"] == states
    assert fused["error"][:2] == (bad, kind)
    if case == "unknown":
        assert "no_such_node" in fused["error"][2]


# --- on real workers ------------------------------------------------------------------


def cluster_report(settings: Settings, run: PlanRun, plan: Any) -> dict[str, Any]:
    """What every view says about the run, and the counts each one gives."""
    with contextlib.suppress(RunError):  # a failed run: its views are what is checked
        run.wait(timeout=60)
    record = read_run(settings, run.id)
    status = record.status
    tries = attempts(record.history)
    exported = [e for _, e in soma_events(status, record.history, record.plan)]
    listed = next(
        r
        for r in list_runs(Redis.from_url(settings.redis_url), RedisKeys(settings.key_prefix))
        if r["run_id"] == run.id
    )
    _check_times(plan, {n: vars(s) | {"state": s.state} for n, s in status.nodes.items()})
    by_attempt = {a.node_id: (a.state, a.error) for a in tries}
    for attempt in tries:  # the timeline's bars: each node's own, in order
        assert attempt.end is not None and attempt.start <= attempt.end
    error = status.error or {}
    return {
        "state": status.state,
        "error": (error.get("node_id"), error.get("type"), error.get("message")),
        "nodes": {n: s.state for n, s in status.nodes.items()},
        "node_errors": {n: s.error for n, s in status.nodes.items() if s.error},
        "timeline": by_attempt,
        "done_counts": {
            "status": status.done,
            "progress": run.progress().done,
            "dashboard_runs": listed["done"],
            "timeline": sum(1 for a in tries if a.state == "done"),
            "soma_export": sum(1 for e in exported if e["event_type"] == "NodeCompleted"),
        },
        "failed_counts": {
            "status": sum(1 for s in status.nodes.values() if s.state == "failed"),
            "timeline": sum(1 for a in tries if a.state == "failed"),
            "soma_export": sum(1 for e in exported if e["event_type"] == "NodeFailed"),
        },
    }


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_on_workers_a_fused_chain_reports_as_the_unfused_plan(
    settings: Settings, two_workers: tuple[WorkerProcess, WorkerProcess], case: str
) -> None:
    gpu, _ = two_workers
    plan, bad, kind, states = EXPECTED[case]
    pinned = remote("gpu", plan)  # the whole chain on one worker: it fuses
    reports = {}
    for fuse in (True, False):
        wait_idle(settings)
        run = submit_plan(pinned, settings=settings, require_workers=True, fuse=fuse)
        fused = Redis.from_url(settings.redis_url).hget(
            RedisKeys(settings.key_prefix).run(run.id), "fused"
        )
        assert bool(json.loads(fused or b"[]")) == fuse
        reports[fuse] = cluster_report(settings, run, plan)
    assert reports[True] == reports[False]
    report = reports[True]
    assert report["nodes"] == states
    assert report["error"][:2] == (bad, kind)
    ran = sum(1 for s in states.values() if s == "done")
    assert set(report["done_counts"].values()) == {ran}
    assert set(report["failed_counts"].values()) == {0 if bad is None else 1}
    if bad is not None:
        assert report["timeline"][bad][0] == "failed"
        assert report["node_errors"][bad].startswith(kind)
        assert gpu.worker_id in report["error"][2] or kind != "UnknownNodeError"
