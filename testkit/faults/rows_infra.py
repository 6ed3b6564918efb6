"""The fault matrix's rows, part two: producers, Redis, S3, disk, poison and bad messages."""

from __future__ import annotations

import base64
import json
import random
import signal
import sys
import time
import uuid
from typing import Any

from celery import Celery

from somatize_tasks import PlanRun
from somatize_tasks.config.keys import NODE_TASK, TRANSFER_FAILED_TASK, RedisKeys
from somatize_tasks.local_cluster.processes import wait_until
from testkit.faults.cluster import FaultCluster, Proc
from testkit.faults.outcome import MISSED, OTHER, Expectation, Outcome, Waiter
from testkit.faults.rows import (
    busy,
    expected,
    fork_plan,
    no_transfer,
    node_worker,
    submit,
    transfer_plan,
    waiter,
    when_busy,
)
from testkit.plans import ex, par, remote, seq

FORGED = ["FORGED"]

# --- producers ------------------------------------------------------------------------------


def wide_plan(width: int = 400) -> tuple[dict[str, Any], dict[str, Any]]:
    """A Parallel of ``width`` one-node branches, each with its own known output."""
    plan = par(*[ex(f"fm_leaf_{i}") for i in range(2, width + 2)])
    return plan, {f"fm_leaf_{i}": {"i": i} for i in range(2, width + 2)}


def start_producer(
    c: FaultCluster, plan: dict[str, Any], params: dict[str, Any], count: int = 1
) -> Proc:
    name = f"producer-{uuid.uuid4().hex[:6]}"
    path = c.root / f"{name}.json"
    path.write_text(json.dumps({"plan": plan, "params": params}))
    env = {**c.env(), "SOMATIZE_WORKER_ID": f"{c.prefix}-{name}"}
    argv = [sys.executable, "-m", "testkit.faults.producer", str(path), "--count", str(count)]
    return c.spawn_other(name, argv, env)


def printed_runs(proc: Proc) -> list[str]:
    return [line.split()[1] for line in proc.tail(10**6).splitlines() if line.startswith("RUN ")]


def attach(c: FaultCluster, run_id: str) -> PlanRun:
    return PlanRun.attach(run_id, settings=c.settings())


def producer_killed(before_return: bool) -> Any:
    def row(c: FaultCluster, bound: float) -> list[Outcome]:
        plan, params = wide_plan()
        expected(plan, params)  # first: a local run must not delay the fault
        client, keys = c.redis_client(), RedisKeys(c.prefix)
        known = set(client.zrange(keys.runs, 0, -1))
        proc = start_producer(c, plan, params)
        found: list[str] = []

        def recorded() -> bool:
            new = set(client.zrange(keys.runs, 0, -1)) - known
            found[:] = [r.decode() for r in new]
            return bool(found) and client.hlen(keys.run(found[0], "nodes")) > 0

        if before_return:
            if not wait_until(recorded, 60, 0.002):
                return [Outcome(OTHER, None, f"no run recorded: {proc.tail(300)}")]
            time.sleep(random.uniform(0, 0.05))  # into the publishing, not past it
        else:
            wait_until(lambda: bool(printed_runs(proc)) or not proc.alive(), 60, 0.002)
            found[:] = printed_runs(proc)
        returned = bool(printed_runs(proc))
        proc.signal(signal.SIGKILL)
        fault_at = time.monotonic()
        if not found:
            return [Outcome(OTHER, None, f"no run: {proc.tail(300)}")]
        if before_return and returned:
            return [Outcome(MISSED, None, "submit_plan returned before the kill")]
        w = Waiter(attach(c, found[0]), Expectation(output=expected(plan, params)), bound)
        w.mark_fault(fault_at)
        return [w.start().outcome()]

    return row


def three_producers(c: FaultCluster, bound: float) -> list[Outcome]:
    """30 runs from 3 producer processes at once; a busy worker SIGKILLed mid-way."""
    plan, params = fork_plan(width=3, s=0.3)
    expected(plan, params)
    producers = [start_producer(c, plan, params, count=10) for _ in range(3)]
    wait_until(lambda: sum(len(printed_runs(p)) for p in producers) >= 10, 60, 0.02)
    runs = [attach(c, r) for p in producers for r in printed_runs(p)]
    victims = wait_until(lambda: any(busy(c, r) for r in runs), 20, 0.02)
    running = sorted({n for r in runs for n in busy(c, r)}) if victims else list(c.workers)
    c.kill(random.choice(running))
    fault_at = time.monotonic()
    wait_until(lambda: all("DONE" in p.tail() or not p.alive() for p in producers), 60, 0.1)
    ids = [r for p in producers for r in printed_runs(p)]
    waiters = []
    for run_id in ids:
        w = Waiter(attach(c, run_id), Expectation(output=expected(plan, params)), bound)
        w.mark_fault(fault_at)
        waiters.append(w.start())
    outcomes = [w.outcome() for w in waiters]
    missing = 30 - len(ids)
    tails = "; ".join(p.tail(200) for p in producers if "DONE" not in p.tail())
    return outcomes + [Outcome(OTHER, None, f"never submitted: {tails}")] * missing


# --- Redis and S3 ----------------------------------------------------------------------------


def redis_restart(c: FaultCluster, bound: float) -> list[Outcome]:
    """SIGKILL the cluster's Redis mid-run, 2 s down, start it again (AOF or not: the row's)."""
    plan, params = fork_plan()
    run = submit(c, plan, params)
    w = waiter(run, plan, params, bound, clear=r"RunStateLost|gone from Redis")
    when_busy(c, run)
    w.mark_fault(c.restart_redis(down_s=2.0))
    return [w.outcome()]


def s3_paused(c: FaultCluster, bound: float) -> list[Outcome]:
    """SIGSTOP moto's server for 8 s while a value must go through it, then SIGCONT."""
    plan, params = transfer_plan(mb=8)
    run = submit(c, plan, params)
    if missed := no_transfer(run):
        return missed
    w = waiter(run, plan, params, bound)
    wait_until(lambda: node_worker(c, run, "fm_big") is not None, 30, 0.01)
    assert c.moto is not None
    c.moto.signal(signal.SIGSTOP)
    w.mark_fault()
    try:
        time.sleep(8.0)
    finally:
        c.moto.signal(signal.SIGCONT)
    return [w.outcome()]


def disk_full(c: FaultCluster, bound: float) -> list[Outcome]:
    """A 4 MB output on the worker whose cache is a 2 MB tmpfs (the ``small`` tag)."""
    plan = seq(remote("small", ex("fm_big")), ex("fm_digest"))
    params = {"fm_big": {"mb": 4}}
    run = submit(c, plan, params)
    w = waiter(
        run,
        plan,
        params,
        bound,
        clear=r"(?is)fm_big.*(no space left|ENOSPC|disk (is )?full|Errno 28)",
    )
    w.mark_fault()
    return [w.outcome()]


# --- poison and bad messages -----------------------------------------------------------------


def poison(c: FaultCluster, bound: float) -> list[Outcome]:
    """A node that kills its own worker; dead workers come back after 1 s, as under
    a supervisor, so only a limit on the node's deaths ends the cascade."""
    plan = seq(ex("fm_inc"), par(ex("fm_poison"), ex("fm_inc_2")), ex("fm_echo"))
    run = submit(c, plan, {}, local=False)  # fm_poison would kill this process
    w = Waiter(
        run, Expectation(output=object(), clear=r"(?is)fm_poison.*(died|killed|death|lost)"), bound
    ).start()
    w.mark_fault()
    until = time.monotonic() + bound + 5
    deaths = 0
    while not w.done and time.monotonic() < until:
        dead = [n for n, p in c.workers.items() if not p.alive()]
        if dead:
            deaths += len(dead)
            c.note_deaths()
            time.sleep(1.0)
            for name in dead:
                c.start_worker(name)
        time.sleep(0.2)
    w.notes.append(f"{deaths} worker deaths")
    return [w.outcome()]


def malformed(c: FaultCluster, bound: float) -> list[Outcome]:
    """A message Celery cannot parse on a busy worker's queue (body ``[1]``, or an
    empty content type, in turn), mid-run; the worker must survive it."""
    plan, params = fork_plan()
    run = submit(c, plan, params)
    w = waiter(run, plan, params, bound)
    victim = random.choice(when_busy(c, run) or list(c.workers))
    malformed.turn = getattr(malformed, "turn", 0) + 1  # type: ignore[attr-defined]
    content_type = "application/json" if malformed.turn % 2 else ""  # type: ignore[attr-defined]
    body = b"[1]" if content_type else b'{"run_id": "x"}'
    envelope = {
        "body": base64.b64encode(body).decode(),
        "content-encoding": "utf-8",
        "content-type": content_type,
        "headers": {"lang": "py", "task": NODE_TASK, "id": uuid.uuid4().hex},
        "properties": {
            "delivery_mode": 2,
            "priority": 0,
            "body_encoding": "base64",
            "delivery_info": {"exchange": "", "routing_key": c.queue(victim)},
            "delivery_tag": uuid.uuid4().hex,
        },
    }
    c.redis_client().lpush(c.queue(victim), json.dumps(envelope))
    w.mark_fault()
    outcome = w.outcome()
    time.sleep(2.0)
    c.note_deaths()
    return [outcome]


def forger(c: FaultCluster) -> Celery:
    """A plain Celery app on the cluster's Redis: what anyone with Redis access has
    (JSON, no message key)."""
    app = Celery("forger", broker=c.redis_url)
    app.conf.update(task_serializer="json", accept_content=["json"])
    return app


def forged_node(c: FaultCluster, bound: float) -> list[Outcome]:
    """A node message for another run's block that is not dispatched yet, input FORGED."""
    plan = seq(ex("fm_inc"), par(ex("fm_inc_2"), ex("fm_inc_3")), ex("fm_echo"))
    params = {"fm_inc_2": {"s": 2.0}, "fm_inc_3": {"s": 2.0}}
    run = submit(c, plan, params)
    w = waiter(run, plan, params, bound)
    wait_until(lambda: node_worker(c, run, "fm_inc_2") is not None, 30, 0.02)
    program = run._context.program(run.id)
    assert program is not None
    block = next(b for b in program.blocks if b.task_node_ids() == ["fm_echo"])
    worker = c.name_of(block.worker_id) or "w1"
    forger(c).send_task(
        NODE_TASK,
        queue=c.queue(worker),
        kwargs={
            "run_id": run.id,
            "block": block.index,
            "epoch": 0,
            "input": {"value": FORGED},
        },
    )
    w.mark_fault()
    return [w.outcome()]


def forged_transfer_failed(c: FaultCluster, bound: float) -> list[Outcome]:
    """A ``somatize.run.transfer_failed`` for a running node of another run, chosen text."""
    plan, params = fork_plan(s=1.0)
    run = submit(c, plan, params)
    w = waiter(run, plan, params, bound, wrong=r"FORGED")
    statuses: list[dict[str, Any]] = []

    def running() -> bool:
        raw = c.redis_client().hgetall(run._state.nodes)
        statuses[:] = [s for s in map(json.loads, raw.values()) if s.get("state") == "running"]
        return bool(statuses)

    wait_until(running, 30, 0.02)
    target = statuses[0]
    forger(c).send_task(
        TRANSFER_FAILED_TASK,
        queue=c.queue(c.name_of(target["worker"]) or "w1"),
        args=[
            {},
            "FORGED: chosen text",
            None,
            run.id,
            target["block"],
            target["epoch"],
            target["task_id"],
        ],
    )
    w.mark_fault()
    return [w.outcome()]
