"""Chaos: SIGKILL a worker in the middle of every run and check the runs still finish right.

10 runs (``--runs``) of a 50-node plan (two fork-joins of sleeping nodes
whose outputs are known) on 3 worker processes. In each run a random worker
that is running a node is SIGKILLed once a third of the nodes are done; in
every other run it is restarted (same id) after ``--restart-after`` seconds.
Prints, per run and in total: completed with the correct output, nodes
recomputed, seconds from the kill to the run's completion.

Usage: ``python -m bench.chaos_kill_worker [--runs 10]``.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import bench_settings
from somatize_tasks import PlanRun, run_local, submit_plan
from somatize_tasks.config.settings import Settings
from testkit.nodes import chaos_nodes  # noqa: F401  (the catalog, for the expected output)
from testkit.workers import WorkerFactory, WorkerProcess

NODES = "testkit.nodes.chaos_nodes"


def fork_join(prefix: str, width: int, first: int) -> tuple[list[Any], int]:
    branches = [
        {
            "Sequence": [
                {"Execute": {"node_id": f"ch_inc_{first + 2 * i}"}},
                {"Execute": {"node_id": f"ch_inc_{first + 2 * i + 1}"}},
            ]
        }
        for i in range(width)
    ]
    return [
        {"Parallel": branches},
        {"Execute": {"node_id": f"ch_join_{prefix}"}},
    ], first + 2 * width


def chaos_plan() -> dict[str, Any]:
    """src, 12 two-node branches, join, 11 two-node branches, join, 2 more: 50 nodes."""
    first, nxt = fork_join("2", 12, 2)
    second, nxt = fork_join("3", 11, nxt)
    tail = [
        {"Execute": {"node_id": f"ch_inc_{nxt}"}},
        {"Execute": {"node_id": f"ch_inc_{nxt + 1}"}},
    ]
    return {"Sequence": [{"Execute": {"node_id": "ch_inc"}}, *first, *second, *tail]}


def recomputed(run: PlanRun) -> int:
    raw = run._context.redis.hvals(run._state.nodes)
    return sum(1 for value in raw if json.loads(value).get("recomputed"))


def kill_when_busy(
    run: PlanRun, workers: dict[str, WorkerProcess], total: int
) -> tuple[str, float]:
    """Wait until a third of the nodes are done, then SIGKILL a worker running a node."""
    while True:
        status = run.status()
        busy = sorted(
            {n.worker for n in status.nodes.values() if n.state == "running" and n.worker}
        )
        if status.done >= total // 3 and busy:
            victim = random.choice(busy)
            workers[victim].signal_group(signal.SIGKILL)
            return victim, time.monotonic()
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--restart-after", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--timeout", type=float, default=180.0, help="give a run up after")
    args = parser.parse_args()
    random.seed(args.seed)

    overrides = {"inline_max_bytes": 128, "reroute_grace_s": 10}
    with bench_settings("chaos", **overrides) as (settings, root):
        chaos(settings, root, args.runs, args.restart_after, args.timeout)


def chaos(
    settings: Settings, root: Path, runs: int, restart_after: float, timeout: float = 180.0
) -> None:
    """Run the plan ``runs`` times, killing a worker in each; print the figures."""
    prefix = settings.key_prefix
    plan = chaos_plan()
    expected = run_local(plan).output
    total = 50
    factory = WorkerFactory(settings, root)
    try:
        workers = {
            w.worker_id: w for w in (factory.start(n, tags="cpu", nodes=NODES) for n in "xyz")
        }
        rows = []
        for index in range(runs):
            restart = index % 2 == 1
            run = submit_plan(plan, settings=settings, require_workers=True)
            victim, killed_at = kill_when_busy(run, workers, total)
            if restart:
                name = victim.removeprefix(f"{prefix}-")
                threading.Timer(
                    restart_after,
                    lambda n=name: workers.update(
                        {f"{prefix}-{n}": factory.start(n, tags="cpu", nodes=NODES, wait=False)}
                    ),
                ).start()
            try:
                correct = run.wait(timeout=timeout) == expected
            except Exception as exc:  # reported, not raised: the benchmark counts failures
                print(f"  run {index}: {type(exc).__name__}: {exc}")
                for node_id, status in sorted(run.status().nodes.items()):
                    if status.state != "done":  # what the run is stuck on
                        raw = run._context.redis.hget(run._state.nodes, node_id)
                        print(f"    {node_id}: {raw.decode() if raw else status.state}")
                correct = False
            seconds = time.monotonic() - killed_at
            rows.append((correct, recomputed(run), seconds))
            print(
                f"run {index:2}: killed {victim.removeprefix(prefix + '-')}"
                f"{' (restarted)' if restart else '            '} correct={correct!s:5} "
                f"recomputed={rows[-1][1]:2} kill->done={seconds:5.1f}s",
                flush=True,
            )
            if not restart:  # bring the worker back for the next run
                name = victim.removeprefix(f"{prefix}-")
                workers[victim] = factory.start(name, tags="cpu", nodes=NODES)
            else:
                time.sleep(max(0.0, restart_after + 1 - (time.monotonic() - killed_at)))
                factory.wait_live(workers[victim])
        ok = sum(1 for correct, _, _ in rows if correct)
        print(f"runs completed with the correct output: {ok}/{len(rows)}")
        print(
            f"nodes recomputed: {sum(r[1] for r in rows)} in all, "
            f"median {statistics.median(r[1] for r in rows)} per run"
        )
        print(
            "seconds from the kill to completion: "
            f"median {statistics.median(r[2] for r in rows):.1f}, "
            f"max {max(r[2] for r in rows):.1f}"
        )
    finally:
        factory.close()


if __name__ == "__main__":
    main()
