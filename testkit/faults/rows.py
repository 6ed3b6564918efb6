"""The fault matrix's rows, part one: what every row shares, and worker and transfer faults.

A row's function runs ONE repetition on a started :class:`FaultCluster`:
it submits its plan, injects its fault, and returns one :class:`Outcome` per
run (one, or thirty for the three producers). The harness restarts dead
workers between repetitions (:meth:`FaultCluster.revive`).
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from inspect import signature
from typing import Any

from somatize_tasks import PlanRun, run_local, submit_plan
from somatize_tasks.local_cluster.processes import wait_until
from testkit.faults.cluster import FaultCluster
from testkit.faults.outcome import MISSED, Expectation, Outcome, Waiter
from testkit.nodes import faults_nodes  # noqa: F401  (the catalog, for the expected outputs)
from testkit.plans import ex, par, remote, seq

RowFn = Callable[[FaultCluster, float], list[Outcome]]


@dataclass(frozen=True)
class Row:
    key: str
    title: str
    fn: RowFn
    bound_s: float  # a run with no end within this is hung
    may_fail: bool = False  # a clear error is the right end (the run cannot finish)
    aof: bool = False
    tiny_disk_mb: int | None = None
    tags: dict[str, str] | None = None  # worker name -> tags (default: WORKER_TAGS)
    keeps_workers: bool = False  # the fault must not take any worker down
    tiny_ram_mb: int | None = None  # a shared directory store with a RAM dir this small


# --- plans ------------------------------------------------------------------------------


def fork_plan(width: int = 6, s: float = 0.8) -> tuple[dict[str, Any], dict[str, Any]]:
    """src, ``width`` two-node branches, join: 2 + 2*width sleeping nodes."""
    branches = [seq(ex(f"fm_inc_{2 * i + 2}"), ex(f"fm_inc_{2 * i + 3}")) for i in range(width)]
    plan = seq(ex("fm_inc"), par(*branches), ex("fm_join"))
    params = {f"fm_inc_{n}": {"s": s} for n in range(2, 2 * width + 2)}
    return plan, {**params, "fm_inc": {"s": s}}


def transfer_plan(mb: int = 24) -> tuple[dict[str, Any], dict[str, Any]]:
    """A big value made on a ``src`` worker and read on a ``dst`` worker: through S3."""
    return seq(remote("src", ex("fm_big")), remote("dst", ex("fm_digest"))), {"fm_big": {"mb": mb}}


_expected: dict[str, Any] = {}


def expected(plan: dict[str, Any], params: dict[str, Any]) -> Any:
    """The plan's output, computed here (cached: some plans are slow)."""
    key = repr((plan, params))
    if key not in _expected:
        _expected[key] = run_local(plan, params=params).output
    return _expected[key]


#: Runs carry a deadline once ``submit_plan`` takes one (issue 13), far past any row's
#: bound: it ends runs a repetition left behind, and never turns a hang into an error.
DEADLINE: dict[str, Any] = (
    {"deadline_s": 300.0} if "deadline_s" in signature(submit_plan).parameters else {}
)


def submit(
    c: FaultCluster, plan: dict[str, Any], params: dict[str, Any], *, local: bool = True
) -> PlanRun:
    """Submit to the cluster, the expected output computed first (``local``: a
    local run takes the nodes' time, and must not delay the fault)."""
    if local:
        expected(plan, params)
    return submit_plan(plan, params=params, settings=c.settings(), require_workers=True, **DEADLINE)


def waiter(
    run: PlanRun, plan: dict[str, Any], params: dict[str, Any], bound: float, **expect: Any
) -> Waiter:
    return Waiter(run, Expectation(output=expected(plan, params), **expect), bound).start()


# --- watching a run -------------------------------------------------------------------


def busy(c: FaultCluster, run: PlanRun) -> list[str]:
    """Names of the workers running a node of ``run`` now."""
    nodes = run.status().nodes.values()
    return sorted({n for s in nodes if s.state == "running" and (n := c.name_of(s.worker))})


def when_busy(c: FaultCluster, run: PlanRun, done: int = 1, timeout_s: float = 30) -> list[str]:
    """Once ``done`` nodes are done and some worker runs one: the busy workers
    (none if the run ended first)."""
    found: list[str] = []

    def ready() -> bool:
        status = run.status()
        found[:] = sorted(
            {
                n
                for s in status.nodes.values()
                if s.state == "running" and (n := c.name_of(s.worker))
            }
        )
        return (bool(found) and status.done >= done) or status.state != "running"

    wait_until(ready, timeout_s, 0.03)
    return found


def node_worker(c: FaultCluster, run: PlanRun, node_id: str, state: str = "running") -> str | None:
    status = run.status().nodes.get(node_id)
    return c.name_of(status.worker) if status and status.state == state else None


# --- worker faults ----------------------------------------------------------------------


def kill_workers(count: int) -> RowFn:
    def row(c: FaultCluster, bound: float) -> list[Outcome]:
        plan, params = fork_plan()
        run = submit(c, plan, params)
        w = waiter(run, plan, params, bound)
        running = when_busy(c, run)
        others = [n for n in c.workers if n not in running]
        victims = (random.sample(running, len(running)) + others)[:count]
        for name in victims:
            c.kill(name)
        w.mark_fault()
        outcome = w.outcome()
        if outcome.kind != "correct":
            final = run.status().nodes["fm_join"]
            outcome.detail += (
                f" [killed {', '.join(victims)}; fm_join {final.state} on "
                f"{c.name_of(final.worker)}]"
            )
        return [outcome]

    return row


def sigstop(c: FaultCluster, bound: float) -> list[Outcome]:
    """SIGSTOP a busy worker for three heartbeat TTLs, then SIGCONT it."""
    plan, params = fork_plan()
    run = submit(c, plan, params)
    w = waiter(run, plan, params, bound)
    victim = random.choice(when_busy(c, run) or list(c.workers))
    c.kill(victim, signal.SIGSTOP)
    w.mark_fault()
    time.sleep(3 * c.settings().heartbeat_ttl_s)
    c.kill(victim, signal.SIGCONT)
    return [w.outcome()]


def pinned_dead(c: FaultCluster, bound: float) -> list[Outcome]:
    """A node pinned (WorkerId) to a worker that is SIGKILLed while running it."""
    target = {"WorkerId": c.worker_id("w1")}
    plan = seq(
        ex("fm_inc"), {"Remote": {"node_id": "fm_inc_2", "target": target, "plan": ex("fm_inc_2")}}
    )
    params = {"fm_inc_2": {"s": 3.0}}
    run = submit(c, plan, params)
    w = waiter(run, plan, params, bound, clear=r"(?is)fm_inc_2.*(no live worker|dead|died)")
    wait_until(lambda: node_worker(c, run, "fm_inc_2") == "w1", 20, 0.03)
    c.kill("w1")
    w.mark_fault()
    return [w.outcome()]


def completion_window(c: FaultCluster, bound: float) -> list[Outcome]:
    """The worker that records ``fm_trip``'s completion is SIGKILLed right after
    (``testkit.nodes.faults_nodes``), before it can publish what that made ready."""
    plan = seq(
        ex("fm_inc"), ex("fm_trip"), par(*[ex(f"fm_inc_{i}") for i in range(2, 6)]), ex("fm_join")
    )
    params: dict[str, Any] = {}
    run = submit(c, plan, params)
    w = waiter(run, plan, params, bound)
    marker = c.root / "trip" / run.id
    if wait_until(marker.exists, 30, 0.005):
        w.mark_fault()
        # The trip is the harness's own fault, not a worker lost (it dies a moment later).
        wait_until(lambda: any(not p.alive() for p in c.workers.values()), 5, 0.01)
        c.killed.update(p.popen.pid for p in c.workers.values() if not p.alive())
    else:
        w.notes.append("trip never fired")
    return [w.outcome()]


def final_output_lost(c: FaultCluster, bound: float) -> list[Outcome]:
    """A finished run whose final output lives only in the cache of a worker that
    is then SIGKILLed: ``wait`` must still give the output (or a clear error) in time."""
    plan, params = seq(ex("fm_inc"), ex("fm_inc_2")), {"fm_inc_2": {"s": 0.5}}
    run = submit(c, plan, params)
    # Until it ends, read from Redis only: wait() would fetch the output into S3.
    wait_until(lambda: run.status().state != "running", bound, 0.05)
    holder = node_worker(c, run, "fm_inc_2", "done")
    if holder is None:
        return [Outcome("other error", None, "the run did not finish before the fault")]
    c.kill(holder)
    w = waiter(run, plan, params, bound)
    w.fault_after_end = True
    w.mark_fault()
    return [w.outcome()]


# --- transfers ---------------------------------------------------------------------------


def no_transfer(run: PlanRun) -> list[Outcome]:
    """Not a transfer row's repetition if both ends were placed on one worker."""
    placed = run.distribution.worker_of()
    if placed.get("fm_big") != placed.get("fm_digest"):
        return []
    return [Outcome(MISSED, None, f"no transfer: both ends placed on {placed.get('fm_big')}")]


def mid_upload(c: FaultCluster, bound: float) -> list[Outcome]:
    """SIGKILL the source worker while its multipart upload to S3 is in flight."""
    plan, params = transfer_plan()
    run = submit(c, plan, params)
    if missed := no_transfer(run):
        return missed
    w = waiter(run, plan, params, bound)
    s3 = c.s3()

    def uploading() -> bool:
        return bool(s3.list_multipart_uploads(Bucket="faults").get("Uploads"))

    if not wait_until(uploading, 30, 0.02):
        w.notes.append("no upload seen")
    source = node_worker(c, run, "fm_big", "done")
    if source is not None:
        c.kill(source)
    w.mark_fault()
    return [w.outcome()]


def mid_download(c: FaultCluster, bound: float) -> list[Outcome]:
    """SIGKILL the target worker while it downloads the value from S3."""
    plan, params = transfer_plan()
    run = submit(c, plan, params)
    if missed := no_transfer(run):
        return missed
    w = waiter(run, plan, params, bound)
    target = c.name_of(run.distribution.worker_of().get("fm_digest"))
    cache = c.root / "cache" / c.worker_id(target or "")

    def downloading() -> bool:
        return any(p.name.endswith(".tmp") for p in cache.rglob("*"))  # LocalDir's partial files

    s3 = c.s3()

    def uploaded() -> bool:  # the download starts right after
        listed = s3.list_objects_v2(Bucket="faults").get("Contents", [])
        return any("fm_big" in item["Key"] for item in listed)

    wait_until(lambda: downloading() or uploaded(), 30, 0.005)
    if not wait_until(downloading, 0.5, 0.002):
        w.notes.append("killed once uploaded; no partial file seen")
    if target is not None:
        c.kill(target)
    w.mark_fault()
    return [w.outcome()]
