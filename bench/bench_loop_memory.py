"""A long loop's Redis memory: flat over 10,000 passes (issue 21).

A Loop with a cap of 10,000 passes and no stop (``BodyTerminal``: it runs to its
cap) runs on real workers: its body adds to a carry, so every pass is real work
with a value handed to the next. While it runs, the run's keys are measured
exactly (``MEMORY USAGE key SAMPLES 0``) about five times a second, with the number of
passes so far and the fields of its working state (``results``); the figures at
the first sample past pass 100 are the reference. Before, each pass left a set of
fields behind (49,618 after 60 s, memory rising linearly); loop passes are now
forgotten one pass behind (``runtime/state/start_state.py``).

The history list keeps the newest 20,000 events of any run (``history.MAX_EVENTS``):
it grows until it holds them, then stays; it is shown apart. ``--hops`` puts the
body's two nodes on two workers, so every pass moves a value between them.

    python -m bench.bench_loop_memory [--passes 10000] [--hops]
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from bench.common import bench_settings
from somatize_tasks import submit_plan
from somatize_tasks.runtime.producer.handle import PlanRun
from testkit.workers import WorkerFactory

NODES = "testkit.nodes.run_nodes"
HISTORY = "history"


def loop_plan(passes: int, workers: list[str]) -> dict[str, Any]:
    """``passes`` passes of ``rt_add`` then ``rt_add_2`` (on ``workers`` in turn)."""

    def step(node_id: str, index: int) -> dict[str, Any]:
        plan = {"Execute": {"node_id": node_id}}
        if len(workers) < 2:
            return plan
        target = {"WorkerId": workers[index % len(workers)]}
        return {"Remote": {"node_id": node_id, "target": target, "plan": plan}}

    return {
        "Loop": {
            "node_id": "spin",
            "body": {"Sequence": [step("rt_add", 0), step("rt_add_2", 1)]},
            "max_iterations": passes,
            "carry_from": "rt_add_2",
        }
    }


def sample(run: PlanRun) -> dict[str, int]:
    """Passes so far, the working state's fields, and every key's bytes by part."""
    client, state = run._context.redis, run._state
    found = {"passes": int(client.hget(state.results, "epochs") or 0)}
    found["fields"] = int(client.hlen(state.results))
    for raw in client.scan_iter(match=f"{state.meta}*", count=1000):
        part = raw.decode()[len(state.meta) + 1 :] or "meta"
        found[part] = int(client.memory_usage(raw, samples=0) or 0)
    return found


def run_bytes(row: dict[str, int], with_history: bool) -> int:
    skip = {"passes", "fields", *(() if with_history else (HISTORY,))}
    return sum(v for k, v in row.items() if k not in skip)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=10_000)
    parser.add_argument("--hops", action="store_true", help="body nodes on two workers")
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])
    )
    rows: list[dict[str, int]] = []
    with bench_settings("bench-loop", run_ttl_s=3600) as (settings, root):
        factory = WorkerFactory(settings, root)
        try:
            names = ("a", "b") if args.hops else ("a",)
            workers = [factory.start(n, tags="cpu", nodes=NODES).worker_id for n in names]
            started = time.monotonic()
            run = submit_plan(
                loop_plan(args.passes, workers), input=0, settings=settings, require_workers=True
            )
            while run.status().state == "running":
                rows.append(sample(run))
                time.sleep(0.2)
            took = time.monotonic() - started
            output = run.wait(timeout=60)
        finally:
            factory.close()
    report(rows, args.passes, took, output)


def report(rows: list[dict[str, int]], passes: int, took: float, output: Any) -> None:
    print(f"{passes} passes in {took:.1f} s ({passes / took:.0f} passes/s); output {output}")
    print(
        f"{'passes':>7} {'fields':>7} {'results B':>10} {'history B':>10} "
        f"{'run B w/o hist':>15} {'run B':>9}"
    )
    shown = [r for r in rows if r["passes"] >= 100]
    step = max(1, len(shown) // 12)
    for row in [*shown[::step], *shown[-1:]]:
        print(
            f"{row['passes']:7} {row['fields']:7} {row.get('results', 0):10} "
            f"{row.get(HISTORY, 0):10} {run_bytes(row, False):15} {run_bytes(row, True):9}"
        )
    if not shown:
        print("no sample past pass 100: too fast, or it failed")
        return
    first, last = shown[0], shown[-1]
    for label, history in (("without the history", False), ("with the history", True)):
        a, b = run_bytes(first, history), run_bytes(last, history)
        print(
            f"run keys {label}: {a} B at pass {first['passes']}, {b} B at pass "
            f"{last['passes']}: {100 * (b - a) / a:+.1f} %"
        )


if __name__ == "__main__":
    main()
