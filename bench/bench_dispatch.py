"""Dispatch overhead: submit_plan against hand-written Celery canvases, in one run.

Starts two real workers (prefork, concurrency 2) on one Redis, then times,
each as the median of several repetitions:

- a 200-node chain (a Sequence of no-op nodes) through ``submit_plan``,
  against a 200-link ``celery.chain`` of a no-op task on one worker's queue;
- a 200-branch fork-join (source, Parallel of 200 no-ops, sink) through
  ``submit_plan``, against a ``chord`` of 200 no-ops and a callback.

Prints both wall times and the ratio (goal: at most 1.5 for the chain and
1.2 for the fork-join). Usage: ``python -m bench.bench_dispatch [--size 200]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from celery import chain, chord

from bench.common import bench_settings
from somatize_tasks import create_app, submit_plan
from somatize_tasks.config.keys import queue_name
from somatize_tasks.config.settings import Settings
from testkit.workers import WorkerFactory


def chain_plan(size: int) -> dict[str, object]:
    return {"Sequence": [{"Execute": {"node_id": f"noop_{i + 2}"}} for i in range(size)]}


def fork_join_plan(size: int) -> dict[str, object]:
    branches = [{"Execute": {"node_id": f"noop_{i + 3}"}} for i in range(size)]
    return {
        "Sequence": [
            {"Execute": {"node_id": "noop"}},
            {"Parallel": branches},
            {"Execute": {"node_id": "noop_2"}},
        ]
    }


def median_s(action: Callable[[], object], repeats: int) -> float:
    action()  # warm up: connections, program caches, pool processes
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    with bench_settings("bench-dispatch") as (settings, root):
        measure(settings, root, args.size, args.repeats)


def measure(settings: Settings, root: Path, size: int, repeats: int) -> None:
    """Start two workers, time both workloads both ways, print the table."""
    factory = WorkerFactory(settings, root)
    try:
        first = factory.start("a", tags="cpu", nodes="testkit.nodes.dispatch_nodes")
        factory.start("b", tags="cpu", nodes="testkit.nodes.dispatch_nodes")
        app = create_app(settings)
        noop = app.signature("bench.noop", queue=queue_name(first.worker_id))

        def ours(plan: dict[str, object]) -> Callable[[], object]:
            return lambda: submit_plan(plan, settings=settings, require_workers=True).wait(
                timeout=600
            )

        def celery_chain() -> object:
            return chain(*[noop.clone() for _ in range(size)]).apply_async().get(timeout=600)

        def celery_chord() -> object:
            header = [noop.clone() for _ in range(size)]
            callback = app.signature("bench.collect", queue=queue_name(first.worker_id))
            return chord(header)(callback).get(timeout=600)

        rows = [
            (
                f"{size}-node chain",
                median_s(ours(chain_plan(size)), repeats),
                median_s(celery_chain, repeats),
                1.5,
            ),
            (
                f"{size}-branch fork-join",
                median_s(ours(fork_join_plan(size)), repeats),
                median_s(celery_chord, repeats),
                1.2,
            ),
        ]
        print(f"median of {repeats} runs each, 2 workers (prefork, concurrency 2), one Redis")
        print(f"{'workload':24} {'submit_plan':>12} {'plain celery':>13} {'ratio':>7} {'goal':>6}")
        for name, mine, theirs, goal in rows:
            verdict = "ok" if mine / theirs <= goal else "over"
            print(
                f"{name:24} {mine:11.3f}s {theirs:12.3f}s "
                f"{mine / theirs:7.2f} {goal:5.1f}  {verdict}"
            )
    finally:
        factory.close()


if __name__ == "__main__":
    main()
