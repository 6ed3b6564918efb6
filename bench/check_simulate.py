"""Check ``somatize-tasks simulate`` against real clusters of 100 and 1,000 fake workers.

On a ``redis-server`` started for the purpose:

1. :func:`somatize_tasks.simulate.calibrate` measures the registry and
   reaper costs; two real workers then run a 100-node chain, which gives
   the dispatch cost per node, the idle p99 dispatch delay (a node's start
   minus its predecessor's end) and the run-state bytes per node. All are
   written to ``somatize_tasks/simulate_costs.json`` (the CLI's default).
2. With 100 and then 1,000 fake workers (``bench/fake_workers.py``: real
   heartbeats and reaper ticks, many per process) beside the two real ones:
   Redis CPU with no run (``INFO cpu`` over ``--seconds``), the registry's
   memory (``MEMORY USAGE`` of its keys), and the p99 dispatch delay of the
   same chain, each next to what ``predict`` says, with the error.

    python -m bench.check_simulate [--seconds 15]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import statistics
import tempfile
import time
from pathlib import Path

from redis import Redis

from bench.fake_workers import fake_workers, measure_redis_cpu, redis_cpu_s
from somatize_tasks import submit_plan
from somatize_tasks.keys import RedisKeys
from somatize_tasks.settings import Settings
from somatize_tasks.simulate import COSTS_FILE, Cluster, Costs, calibrate, predict
from tests.conftest import WorkerFactory, start_redis_server

CHAIN = 100
PLAN = {"Sequence": [{"Execute": {"node_id": "rt_add" if i == 0 else f"rt_add_{i + 1}"}}
                     for i in range(CHAIN)]}


def run_chain(settings: Settings) -> tuple[float, list[float]]:
    """Run the chain; (seconds, dispatch delays in ms: start minus predecessor's end)."""
    start = time.perf_counter()
    run = submit_plan(PLAN, input=0, settings=settings, require_workers=True)
    assert run.wait(timeout=300) == CHAIN
    seconds = time.perf_counter() - start
    nodes = run.status().nodes
    ordered = [nodes["rt_add" if i == 0 else f"rt_add_{i + 1}"] for i in range(CHAIN)]
    delays = [(b.started_at - a.ended_at) * 1000 for a, b in itertools.pairwise(ordered)
              if a.ended_at and b.started_at]
    return seconds, delays


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


def registry_bytes(client: Redis[bytes], prefix: str) -> int:
    keys = RedisKeys(prefix)
    names = [keys.workers_seen, keys.workers_info, keys.worker_tags,
             keys.worker_tag("cpu"), keys.worker_tag("gpu")]
    return sum(int(client.memory_usage(name) or 0) for name in names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    proc, port = start_redis_server()
    root = Path(tempfile.mkdtemp(prefix="check-simulate-"))
    try:
        url = f"redis://127.0.0.1:{port}/0"
        client: Redis[bytes] = Redis.from_url(url)
        costs = calibrate(client)
        settings = Settings(redis_url=url, key_prefix="sim", store_kind="local",
                            store_dir=root / "store", cache_dir=root / "cache",
                            heartbeat_interval_s=2.0, worker_id="sim-producer")
        factory = WorkerFactory(settings, root)
        try:
            for name in ("a", "b"):
                factory.start(name, tags="cpu", nodes="tests.runtime.run_nodes")
            costs = measure_dispatch(client, settings, costs, args.seconds)
            costs.save(COSTS_FILE)
            print(f"costs ({COSTS_FILE.name}): {dataclasses.asdict(costs)}")
            compare(client, settings, costs, args.seconds)
        finally:
            factory.close()
    finally:
        proc.kill()
        proc.wait()


def measure_dispatch(client: Redis[bytes], settings: Settings, costs: Costs,
                     seconds: float) -> Costs:
    run_chain(settings)  # warm up
    background = measure_redis_cpu(client, min(5.0, seconds))
    # Two idle real workers: Celery's own polling, beyond their heartbeats and ticks.
    two = predict(Cluster(workers=2, celery_workers=0), costs).cpu
    celery_idle = max(0.0, background - two) / 2
    memory = float(client.info("memory")["used_memory"])
    cpu_before = redis_cpu_s(client)
    run_s, delays = run_chain(settings)
    spent = redis_cpu_s(client) - cpu_before - background * run_s
    node_bytes = (float(client.info("memory")["used_memory"]) - memory) / CHAIN
    return dataclasses.replace(
        costs, node_us=spent / CHAIN * 1e6, idle_dispatch_p99_ms=p99(delays),
        celery_idle_cpu=celery_idle,
        node_bytes=max(node_bytes, 0.0),
        measured_on=f"{costs.measured_on}; dispatch from a {CHAIN}-node chain on 2 workers",
    )


def compare(client: Redis[bytes], settings: Settings, costs: Costs, seconds: float) -> None:
    print(f"\nload average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"{'workers':>8} {'what':>22} {'measured':>10} {'simulated':>10} {'error':>7}")
    for count in (100, 1_000):
        with fake_workers(settings.model_copy(update={"key_prefix": "sim"}), count,
                          2 * seconds + 60):
            time.sleep(3)
            cpu = measure_redis_cpu(client, seconds)
            memory = registry_bytes(client, "sim")
            run_s, delays = run_chain(settings)
            idle = predict(Cluster(workers=count + 2, celery_workers=2), costs)
            busy = predict(Cluster(workers=count + 2, plan_size=CHAIN, runs=1, parallel=1,
                                   node_s=run_s / CHAIN, celery_workers=2), costs)
        simulated_memory = (count + 2) * costs.bytes_per_worker(count + 2)
        rows = [("Redis CPU, no run %", cpu * 100, idle.cpu * 100),
                ("registry memory KiB", memory / 1024, simulated_memory / 1024),
                ("dispatch p99 ms", p99(delays), busy.dispatch_p99_ms or float("inf"))]
        for what, measured, simulated in rows:
            error = (simulated - measured) / measured * 100
            print(f"{count:>8} {what:>22} {measured:>10.2f} {simulated:>10.2f} {error:>+6.0f}%")


if __name__ == "__main__":
    main()
