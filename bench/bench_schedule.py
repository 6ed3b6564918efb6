"""Time ``scheduler.schedule()`` alone on generated plans.

Two shapes, each at about 10, 100, 1,000 and 10,000 nodes, over 4, 16 and 64
workers:

- fork-join: a chain of stages, each ``split -> Parallel(8 branches of a
  4-step Sequence) -> join``;
- wide-parallel: ``load -> Parallel(every other node) -> merge``;
- fork-join+graph: the fork-join with a predecessors graph holding the same
  data edges (transfers then come from the graph).

Plans and workers are built (and validated) before timing starts; only the
``schedule()`` call is timed. Each case runs several times (at least 5, more
for small plans, for about 0.3 s in all) and the median is reported, because
the machine is shared and noisy.

    python bench/bench_schedule.py            # the full table
    python bench/bench_schedule.py --quick    # fewer repetitions
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from scheduler import ExecutionPlan, WorkerInfo, data_edges, schedule

SIZES = (10, 100, 1_000, 10_000)
WORKER_COUNTS = (4, 16, 64)
FORK_WIDTH = 8
BRANCH_LENGTH = 4


def _execute(node_id: str) -> dict[str, Any]:
    return {"Execute": {"node_id": node_id}}


def fork_join(size: int) -> dict[str, Any]:
    """Stages of split -> Parallel(branches of Sequences) -> join, ``size`` nodes."""
    steps: list[dict[str, Any]] = []
    count = 0
    stage = 0
    while count < size:
        left = size - count
        if left < 3:
            steps.extend(_execute(f"tail{stage}_{i}") for i in range(left))
            count += left
            break
        per_stage = min(left - 2, FORK_WIDTH * BRANCH_LENGTH)
        branches: list[dict[str, Any]] = []
        for b in range(FORK_WIDTH):
            ids = [f"s{stage}b{b}n{i}" for i in range(b, per_stage, FORK_WIDTH)]
            if ids:
                branches.append({"Sequence": [_execute(i) for i in ids]})
        steps.append(_execute(f"split{stage}"))
        steps.append({"Parallel": branches})
        steps.append(_execute(f"join{stage}"))
        count += per_stage + 2
        stage += 1
    return {"Sequence": steps}


def wide_parallel(size: int) -> dict[str, Any]:
    """``load -> Parallel(size - 2 single nodes) -> merge``."""
    branches = [_execute(f"branch{i}") for i in range(size - 2)]
    return {"Sequence": [_execute("load"), {"Parallel": branches}, _execute("merge")]}


def workers(count: int) -> list[WorkerInfo]:
    """A mixed fleet: every fourth worker has a GPU; capacities vary."""
    return [
        WorkerInfo(
            id=f"w{i:03d}",
            name=f"worker-{i}",
            tags=["gpu"] if i % 4 == 0 else ["cpu"],
            gpu=i % 4 == 0,
            cpu_cores=8 * (1 + i % 3),
            active_jobs=i % 3,
            max_concurrent=4 + i % 5,
        )
        for i in range(count)
    ]


def run_times(
    call: Callable[[], object], *, min_reps: int, budget_s: float
) -> tuple[list[float], list[float]]:
    """Wall and CPU times of ``call`` over at least ``min_reps`` runs (about
    ``budget_s`` in all). CPU time leaves out the time other processes had the
    core, which on a shared machine is most of the noise."""
    wall: list[float] = []
    cpu: list[float] = []
    started = time.perf_counter()
    while len(wall) < min_reps or time.perf_counter() - started < budget_s:
        t0, c0 = time.perf_counter(), time.process_time()
        call()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        if len(wall) >= 1000:
            break
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    min_reps, budget_s = (3, 0.05) if args.quick else (5, 0.3)

    shapes: dict[str, tuple[Callable[[int], dict[str, Any]], bool]] = {
        "fork-join": (fork_join, False),
        "wide-parallel": (wide_parallel, False),
        "fork-join+graph": (fork_join, True),
    }
    print(f"schedule() only; median of >= {min_reps} runs per case (~{budget_s} s each);")
    print("'best' is the fastest run and 'cpu' the median CPU time, for a shared, noisy machine")
    header = f"{'shape':<16}{'nodes':>7}{'workers':>9}{'us/call':>12}{'us/node':>10}"
    print(f"{header}{'best us/node':>14}{'cpu us/node':>13}")
    for name, (build, with_graph) in shapes.items():
        for size in SIZES:
            plan = ExecutionPlan.model_validate(build(size))
            nodes = len(plan.node_ids())
            graph = _graph_of(plan) if with_graph else None
            for count in WORKER_COUNTS:
                fleet = workers(count)
                times, cpu = run_times(
                    lambda plan=plan, fleet=fleet, graph=graph: schedule(
                        plan, fleet, predecessors=graph
                    ),
                    min_reps=min_reps,
                    budget_s=budget_s,
                )
                micros = statistics.median(times) * 1e6
                best = min(times) * 1e6 / nodes
                cpu_per_node = statistics.median(cpu) * 1e6 / nodes
                print(
                    f"{name:<16}{nodes:>7}{count:>9}{micros:>12.1f}"
                    f"{micros / nodes:>10.2f}{best:>14.2f}{cpu_per_node:>13.2f}"
                )


def _graph_of(plan: ExecutionPlan) -> dict[str, list[str]]:
    """A predecessors graph with the plan's own data edges."""
    graph: dict[str, list[str]] = {node_id: [] for node_id in plan.node_ids()}
    for source, target in data_edges(plan):
        graph[target].append(source)
    return graph


if __name__ == "__main__":
    main()
