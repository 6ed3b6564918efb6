"""Concurrent runs spread over idle workers: 2 and 8 identical runs on 3 workers.

Three real workers with one slot each (``--concurrency 1``). A run is a
Sequence of three sleeping nodes (``--node-s`` each), so it occupies one
worker for its whole life and the best static spread of ``n`` runs takes
``ceil(n / 3)`` times one run alone. Each round, interleaved: one run alone
(the baseline), then 2 and 8 runs submitted at the same instant from as
many threads. Prints the median makespans over ``--rounds``, the ratio to
the best static spread (goal: at most 1.2), where the runs went, and the
load average.

    python -m bench.bench_concurrent_runs [--rounds 3] [--node-s 0.4]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import threading
import time
from collections import Counter
from typing import Any

from bench.common import bench_settings
from somatize_tasks import submit_plan
from somatize_tasks.config.settings import Settings
from somatize_tasks.workers.reservations import Reservations
from testkit.workers import WorkerFactory

NODES = "testkit.nodes.run_nodes"
PLAN = {"Sequence": [{"Execute": {"node_id": n}} for n in ("rt_sleep", "rt_sleep_2", "rt_sleep_3")]}


def makespan(settings: Settings, count: int, node_s: float) -> tuple[float, Counter[str]]:
    """Submit ``count`` runs at once; seconds until the last finished, and runs per worker."""
    params = {n: {"s": node_s} for n in ("rt_sleep", "rt_sleep_2", "rt_sleep_3")}
    barrier = threading.Barrier(count + 1)
    placed: Counter[str] = Counter()
    errors: list[BaseException] = []
    lock = threading.Lock()

    def one() -> None:
        try:
            barrier.wait()
            run = submit_plan(PLAN, input=1, params=params, settings=settings, require_workers=True)
            run.wait(timeout=300)
            ran_on = {node.worker for node in run.status().nodes.values()}
            with lock:
                placed["+".join(sorted(str(w).rsplit("-", 1)[-1] for w in ran_on))] += 1
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - start, placed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--node-s", type=float, default=0.4)
    parser.add_argument(
        "--no-reservations",
        action="store_true",
        help="place as before reservations (heartbeats only), for comparison",
    )
    args = parser.parse_args()
    if args.no_reservations:
        Reservations.count_in = lambda self, workers: workers  # type: ignore[method-assign]
    with bench_settings("bench-concurrent") as (settings, root):
        factory = WorkerFactory(settings, root)
        try:
            for name in ("a", "b", "c"):
                factory.start(name, tags="cpu", nodes=NODES, concurrency=1)
            measure(settings, args.rounds, args.node_s)
        finally:
            factory.close()


def measure(settings: Settings, rounds: int, node_s: float) -> None:
    makespan(settings, 1, node_s)  # warm up pools, connections, program caches
    times: dict[int, list[float]] = {1: [], 2: [], 8: []}
    spread: dict[int, Any] = {}
    loads = []
    for _ in range(rounds):
        for count in (1, 2, 8):
            seconds, placed = makespan(settings, count, node_s)
            times[count].append(seconds)
            spread[count] = dict(sorted(placed.items()))
            loads.append(os.getloadavg()[0])
    alone = statistics.median(times[1])
    print(
        f"3 workers x 1 slot; a run = 3 nodes x {node_s} s; median of {rounds} rounds "
        f"(interleaved); load average {min(loads):.2f}-{max(loads):.2f} on "
        f"{os.cpu_count()} cores"
    )
    print(
        f"{'runs':>5} {'makespan s':>11} {'best static s':>14} {'ratio':>6} {'goal':>5} "
        f"{'where runs ran (last round)':>30}"
    )
    print(f"{1:>5} {alone:>11.2f} {alone:>14.2f} {1.0:>6.2f} {'':>5}")
    for count in (2, 8):
        best = math.ceil(count / 3) * alone
        median = statistics.median(times[count])
        verdict = "ok" if median / best <= 1.2 else "over"
        print(
            f"{count:>5} {median:>11.2f} {best:>14.2f} {median / best:>6.2f} {1.2:>5} "
            f"{spread[count]!s:>30}  {verdict}"
        )


if __name__ == "__main__":
    main()
