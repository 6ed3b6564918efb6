"""How much Redis a finished run keeps, per node, for several plan shapes.

Issue #10's goal is at most 1 KB of Redis per node of a finished run. This
runs each shape on two real workers (2 slots each), waits for it to end and
counts every key of the run exactly (``MEMORY USAGE key SAMPLES 0``), split
by key (meta, node states, latest outputs, history, ...), over the plan's
node count. Shapes: fork-joins of 200 and 2,000 no-ops, a fused chain of
200, an unfused chain of 500 (as ``bench/check_simulate.py`` runs it), the
same with its nodes on the two workers in turn (a transfer record each), 20
chains of 10, and a loop whose 20-node body runs 5 passes.

    python -m bench.bench_size [--only unfused]
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bench.bench_peers import chain, chains, ex, fork_join
from bench.common import bench_settings, finished_run_bytes
from somatize_tasks import submit_plan
from somatize_tasks.config.settings import Settings
from testkit.workers import WorkerFactory

NODES = "testkit.nodes.peer_nodes,testkit.nodes.run_nodes"
LOOP_BODY = 20
LOOP_PASSES = 5


def unfused_chain(n: int) -> dict[str, Any]:
    """``bench/check_simulate.py``'s chain: ``rt_add`` ``n`` times."""
    return {"Sequence": [ex("rt_add" if i == 0 else f"rt_add_{i + 1}") for i in range(n)]}


def loop(body: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A loop whose body adds 1/``body`` ``body`` times: ``rt_done`` (value >= 5)
    stops it after :data:`LOOP_PASSES` passes from input 0."""
    adds = [f"rt_add_{i + 2}" for i in range(body)]
    plan = {
        "Loop": {
            "node_id": "passes",
            "body": {"Sequence": [*map(ex, adds), ex("rt_done")]},
            "max_iterations": 50,
            "until": {"type": "WhenSignaled", "node": "rt_done"},
            "carry_from": adds[-1],
        }
    }
    return plan, {n: {"k": 1.0 / body} for n in adds}


def hopping_chain(n: int, workers: list[str]) -> dict[str, Any]:
    """The unfused chain with its nodes pinned to the workers in turn: every value
    crosses, so every node adds a transfer record."""
    steps = unfused_chain(n)["Sequence"]
    return {
        "Sequence": [
            {
                "Remote": {
                    "node_id": step["Execute"]["node_id"],
                    "plan": step,
                    "target": {"WorkerId": workers[i % len(workers)]},
                }
            }
            for i, step in enumerate(steps)
        ]
    }


#: name -> (plan, params, fuse chains)
SHAPES: dict[str, tuple[dict[str, Any], dict[str, Any], bool]] = {
    "fork-join 200": (fork_join(200), {}, True),
    "fork-join 2,000": (fork_join(2_000), {}, True),
    "chain 200 (fused)": (chain(200), {}, True),
    "chain 500 unfused": (unfused_chain(500), {}, False),
    "20 chains x 10": (chains(20, 10), {}, True),
    f"loop {LOOP_BODY + 2} x {LOOP_PASSES} passes": (*loop(LOOP_BODY), True),
}


def measure(
    settings: Settings,
    plan: dict[str, Any],
    params: dict[str, Any],
    fuse: bool,
    input_value: Any = 0,
) -> tuple[int, dict[str, int]]:
    """Run ``plan`` to its end; its node count and what its keys keep."""
    run = submit_plan(
        plan,
        input=input_value,
        params=params,
        require_workers=True,
        settings=settings.model_copy(update={"fuse_chains": fuse}),
    )
    run.wait(timeout=600)
    return run.progress().total, finished_run_bytes(run)


@contextmanager
def two_workers(settings: Settings, root: Any) -> Iterator[WorkerFactory]:
    factory = WorkerFactory(settings, root)
    try:
        for name in ("a", "b"):
            factory.start(name, tags="cpu", nodes=NODES)
        yield factory
    finally:
        factory.close()


def table(rows: list[tuple[str, int, dict[str, int]]]) -> str:
    parts = sorted(
        {p for _, _, sizes in rows for p in sizes},
        key=lambda p: -sum(s.get(p, 0) for _, _, s in rows),
    )
    head = f"{'shape':26} {'nodes':>6} {'B/node':>7}  " + " ".join(f"{p:>9}" for p in parts)
    lines = [head, "-" * len(head)]
    for name, count, sizes in rows:
        per = sum(sizes.values()) / count
        cells = " ".join(f"{sizes.get(p, 0) / count:9.0f}" for p in parts)
        lines.append(f"{name:26} {count:6} {per:7.0f}  {cells}")
    lines.append("(bytes per node; columns after B/node split it by key)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="shapes whose name contains this")
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])
    )
    rows = []
    with bench_settings("bench-size") as (settings, root), two_workers(settings, root) as f:
        hops = hopping_chain(500, [w.worker_id for w in f.started])
        for name, (plan, params, fuse) in {
            **SHAPES,
            "chain 500 unfused, hops": (hops, {}, False),
        }.items():
            if args.only in name:
                rows.append((name, *measure(settings, plan, params, fuse)))
    print(table(rows))


if __name__ == "__main__":
    main()
