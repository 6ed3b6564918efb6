"""The fault matrix's rows, part three (issue 21): one value per node, replays, worker
ids, a paused Redis, full RAM and cache directories, and a 10,000-pass loop.

Nodes whose value differs on every execution (``fm_rand``) make a stale value
visible: a run is right only if its output, and the node's value read back by a
fresh reader after the run, are the one execution the run recorded.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid
from typing import Any

from somatize_tasks import PlanRun, submit_plan
from somatize_tasks.config.keys import RedisKeys
from somatize_tasks.errors import RunError
from somatize_tasks.local_cluster.processes import wait_until
from somatize_tasks.runtime.state.history import read_events
from testkit.faults.cluster import FaultCluster
from testkit.faults.outcome import CLEAR, CORRECT, OTHER, WRONG, Expectation, Outcome, Waiter
from testkit.faults.rows import DEADLINE, node_worker, submit
from testkit.plans import ex, remote, seq

RAND = seq(ex("fm_rand"), ex("fm_echo"))


def _fresh(c: FaultCluster, run: PlanRun) -> PlanRun:
    """The run as another process sees it: a cache of its own, so every value is read
    from the store, not from this handle's first read."""
    return PlanRun.attach(run.id, c.settings(worker_id=f"{c.prefix}-reader{uuid.uuid4().hex[:6]}"))


def _starts(c: FaultCluster, run: PlanRun, node_id: str) -> int:
    """How many times ``node_id`` started in ``run`` (its history's running events)."""
    events = read_events(c.redis_client(), RedisKeys(c.prefix), run.id)
    return sum(1 for e in events if e.get("state") == "running" and node_id in e.get("nodes", []))


def _recorded(c: FaultCluster, run: PlanRun, starts: int | None = None) -> Expectation:
    """Right when the output is what a fresh reader reads for ``fm_rand`` and
    ``fm_echo`` (and, with ``starts``, ``fm_rand`` started that many times)."""

    def check(output: Any) -> str | None:
        reader = _fresh(c, run)
        drawn, used = reader.result("fm_rand", timeout=20), reader.result("fm_echo", timeout=20)
        if not (output == drawn == used):
            return "inconsistent: the output, fm_rand and fm_echo read back differ"
        found = _starts(c, run, "fm_rand")
        if starts is not None and found != starts:
            return f"fm_rand started {found} times, not {starts}"
        return None

    return Expectation(check=check)


def paused_returns(c: FaultCluster, bound: float) -> list[Outcome]:
    """SIGSTOP the worker running ``fm_rand`` until the node runs elsewhere, then SIGCONT:
    its stale execution finishes and must change nothing (fencing)."""
    params = {"fm_rand": {"s": 3.0}}
    run = submit(c, RAND, params, local=False)
    w = Waiter(run, _recorded(c, run), bound).start()
    if not wait_until(lambda: node_worker(c, run, "fm_rand") is not None, 30, 0.02):
        return [w.outcome()]
    victim = node_worker(c, run, "fm_rand")
    assert victim is not None
    c.kill(victim, signal.SIGSTOP)
    w.mark_fault()
    try:
        moved = wait_until(lambda: node_worker(c, run, "fm_rand") not in (None, victim), 30, 0.05)
        if not moved:
            w.notes.append("fm_rand never ran elsewhere")
    finally:
        c.kill(victim, signal.SIGCONT)
    return [w.outcome()]


def _held_envelope(c: FaultCluster, task_id: str) -> dict[str, Any] | None:
    """A message a worker holds now, as anyone with Redis access can read it (kombu's
    unacknowledged index)."""
    for raw in c.redis_client().hvals("unacked"):
        envelope, _exchange, _key = json.loads(raw)
        if envelope.get("headers", {}).get("id") == task_id:
            return dict(envelope)
    return None


def replayed(copies: int, redelivered: bool) -> Any:
    def row(c: FaultCluster, bound: float) -> list[Outcome]:
        """A signed node message copied back onto its queue while its node runs
        (``redelivered``: flagged so, as after a worker death): nothing runs again,
        nothing counts as a death."""
        params = {"fm_rand": {"s": 2.5}}
        run = submit(c, RAND, params, local=False)
        w = Waiter(run, _recorded(c, run, starts=1), bound).start()
        status: dict[str, Any] = {}

        def running() -> bool:
            raw = c.redis_client().hget(run._state.nodes, "fm_rand")
            status.update(json.loads(raw) if raw else {})
            return status.get("state") == "running"

        envelope = None
        if wait_until(running, 30, 0.02):
            wait_until(lambda: _held_envelope(c, status["task_id"]) is not None, 5, 0.02)
            envelope = _held_envelope(c, status["task_id"])
        if envelope is None:
            w.notes.append("no message captured")
            return [w.outcome()]
        if redelivered:
            envelope["properties"]["delivery_info"]["redelivered"] = True
        queue = c.queue(c.name_of(status.get("worker")) or "w1")
        for _ in range(copies):
            c.redis_client().lpush(queue, json.dumps(envelope))
        w.mark_fault()
        return [w.outcome()]

    return row


def duplicate_id(c: FaultCluster, bound: float) -> list[Outcome]:
    """A second worker started under a busy worker's id: it must exit at once with one
    line naming the id, and the run must not notice."""
    plan, params = RAND, {"fm_rand": {"s": 2.0}}
    run = submit(c, plan, params, local=False)
    w = Waiter(run, _recorded(c, run, starts=1), bound).start()
    wait_until(lambda: node_worker(c, run, "fm_rand") is not None, 30, 0.02)
    name = node_worker(c, run, "fm_rand") or "w1"
    argv = c.worker_argv(name)
    twin = c.spawn_other(f"twin-{name}-{uuid.uuid4().hex[:4]}", argv, c.env())
    w.mark_fault()
    exited = wait_until(lambda: not twin.alive(), 30, 0.1)
    outcome = w.outcome()
    line = [x for x in twin.tail(4000).splitlines() if x.startswith("Error:")]
    if not exited:
        twin.stop(1.0)
        return [Outcome(WRONG, outcome.seconds, f"a second worker as {name} kept running")]
    if twin.popen.returncode == 0 or len(line) != 1 or "already used" not in line[0]:
        return [Outcome(OTHER, outcome.seconds, f"the twin exited without one clear line: {line}")]
    return [outcome]


def redis_paused_at_submit(c: FaultCluster, bound: float) -> list[Outcome]:
    """Redis SIGSTOPped: a submit waits ``SOMATIZE_REDIS_RETRY_S`` (3 s), then fails with
    one line naming it; one made while it comes back within the budget (10 s) runs."""
    assert c.redis is not None
    outcomes = []
    for budget_s, paused_s in ((3.0, 6.0), (10.0, 2.0)):
        settings = c.settings(redis_retry_s=budget_s)
        c.redis.signal(signal.SIGSTOP)
        resume = threading.Timer(paused_s, c.redis.signal, (signal.SIGCONT,))
        resume.start()
        started = time.monotonic()
        try:
            run = submit_plan(ex("fm_echo"), input=[7], settings=settings, **DEADLINE)
        except RunError as exc:
            took, text = time.monotonic() - started, str(exc)
            clear = "\n" not in text and c.redis_url in text and f"{budget_s:g} s" in text
            kind = CLEAR if clear and paused_s > budget_s else OTHER
            outcomes.append(Outcome(kind, took, text[:300]))
        else:
            w = Waiter(run, Expectation(output=[7]), bound).start()
            w.mark_fault(started)
            outcomes.append(w.outcome())
        finally:
            resume.join()
        time.sleep(2 * c.settings().heartbeat_ttl_s)  # workers beat again before the next
    return outcomes


def ram_and_cache_full(c: FaultCluster, bound: float) -> list[Outcome]:
    """A 3 MB NumPy output on the worker whose cache is a 2 MB tmpfs, the machine's RAM
    directory a 1 MB one: the RAM tier gives it up, the cache is full, and the run
    fails with ``DiskFullError`` naming node, worker, tier and path, no traceback."""
    plan, params = seq(remote("small", ex("fm_array")), ex("fm_digest")), {"fm_array": {"mb": 3}}
    run = submit(c, plan, params, local=False)
    clear = r"(?s)^(?!.*Traceback).*DiskFullError: no space left.*fm_array.*to the cache at"
    w = Waiter(run, Expectation(output=object(), clear=clear), bound).start()
    w.mark_fault()
    return [w.outcome()]


def long_loop(passes: int) -> Any:
    def row(c: FaultCluster, bound: float) -> list[Outcome]:
        """A loop of ``passes`` passes: the right count, and its working state flat."""
        plan = {
            "Loop": {
                "node_id": "spin",
                "body": ex("fm_count"),
                "max_iterations": passes,
                "carry_from": "fm_count",
            }
        }
        run = submit(c, plan, {}, local=False)
        seen: list[tuple[int, int]] = []
        client = c.redis_client()

        def follow() -> None:
            while run.status().state == "running":
                pipe = client.pipeline()
                pipe.hget(run._state.results, "epochs")
                pipe.hlen(run._state.results)
                done, fields = pipe.execute()
                seen.append((int(done or 0), int(fields)))
                time.sleep(0.5)

        watcher = threading.Thread(target=follow, daemon=True)
        watcher.start()

        def check(output: Any) -> str | None:
            watcher.join(5)
            later = [fields for done, fields in seen if done >= 100]
            if output != passes:
                return f"returned {output}"
            if later and max(later) > 50:
                return f"the working state grew to {max(later)} fields"
            return None

        w = Waiter(run, Expectation(check=check), bound).start()
        w.mark_fault()
        outcome = w.outcome()
        if outcome.kind == CORRECT and seen:
            outcome.detail = f"{max(f for _, f in seen)} fields at most"
        return [outcome]

    return row
