"""somatize-tasks against Dask distributed (and Ray, when installed), side by side.

The same workloads on each, on this machine, with 2 workers of 2 slots each:
a 200-node chain; fork-joins of 200, 2,000 and 10,000 no-op branches; 20
independent chains of 10; and a 16 MiB and a 256 MiB NumPy value made on one
worker and read on the other. Rounds are interleaved (every workload on every
peer, then the next round, the peers' order alternating), and each cell is
the median of ``--rounds`` rounds; the ratio is ours over Dask's (at most
1.0 is the goal), followed by the range of the rounds' own ratios. The load
average is printed before and after.

Each peer lets its run's values go once it has the result, and that is
timed: Dask frees a value when no future refers to it any more, so our
runs are ``forget()``-ed (state and values deleted) as part of each run. A
run left to expire keeps its values in the RAM tier for ``run_ttl_s``,
so every new value takes memory the kernel has not just freed, which on
this VM costs up to 3 times as much (see docs/performance.md).

    pip install -e '.[bench]'
    python -m bench.bench_peers [--rounds 3] [--quick] [--only "16 MiB" ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import bench_settings, finished_run_bytes
from somatize_tasks import submit_plan
from somatize_tasks.config.settings import Settings
from testkit.nodes import peer_nodes
from testkit.workers import WorkerFactory

Workload = tuple[str, dict[str, Any]]
MIB = 1 << 20


def ex(node_id: str) -> dict[str, Any]:
    return {"Execute": {"node_id": node_id}}


def noops(first: int, n: int) -> list[dict[str, Any]]:
    """``n`` no-op nodes, numbered as Soma numbers repeats (``peer_noop_2``, ...)."""
    return [ex(f"peer_noop_{i}") for i in range(first + 2, first + 2 + n)]


def chain(n: int, first: int = 0) -> dict[str, Any]:
    return {"Sequence": noops(first, n)}


def fork_join(n: int) -> dict[str, Any]:
    return {"Sequence": [ex("peer_noop"), {"Parallel": noops(0, n)}, ex("peer_collect")]}


def chains(count: int, length: int) -> dict[str, Any]:
    return {"Parallel": [chain(length, k * length) for k in range(count)]}


def value_across(a: str, b: str) -> dict[str, Any]:
    def on(worker: str, node_id: str) -> dict[str, Any]:
        return {"Remote": {"node_id": node_id, "target": {"WorkerId": worker}, "plan": ex(node_id)}}

    return {"Sequence": [on(a, "peer_make"), on(b, "peer_size")]}


def workloads(quick: bool) -> list[tuple[str, str, int]]:
    """(name, kind, size) for every workload."""
    rows = [
        ("chain 200", "chain", 200),
        ("fork-join 200", "fork", 200),
        ("fork-join 2,000", "fork", 2_000),
        ("20 chains x 10", "chains", 10),
        ("16 MiB across", "value", 16 * MIB),
        ("256 MiB across", "value", 256 * MIB),
    ]
    if not quick:
        rows.insert(3, ("fork-join 10,000", "fork", 10_000))
    return rows


class Ours:
    name = "somatize"

    def __init__(self, settings: Settings, root: Path) -> None:
        self.settings = settings
        self.factory = WorkerFactory(settings, root)
        self.a = self.factory.start("a", tags="cpu", nodes="testkit.nodes.peer_nodes").worker_id
        self.b = self.factory.start("b", tags="cpu", nodes="testkit.nodes.peer_nodes").worker_id

    def run(self, kind: str, size: int) -> Any:
        params: dict[str, Any] = {}
        if kind == "chain":
            plan = chain(size)
        elif kind == "fork":
            plan = fork_join(size)
        elif kind == "chains":
            plan = chains(20, size)
        else:
            plan, params = value_across(self.a, self.b), {"peer_make": {"n_bytes": size}}
        run = submit_plan(plan, params=params, settings=self.settings, require_workers=True)
        try:
            return run.wait(timeout=1800)
        finally:
            run.forget()  # as Dask drops values no future refers to any more

    def redis_bytes_per_node(self, kind: str, size: int) -> float:
        """Redis memory a finished run keeps per node (every key of the run)."""
        run = submit_plan(
            fork_join(size) if kind == "fork" else chain(size),
            settings=self.settings,
            require_workers=True,
        )
        run.wait(timeout=600)
        return sum(finished_run_bytes(run).values()) / run.progress().total

    def close(self) -> None:
        self.factory.close()


class DaskPeer:
    name = "dask"

    def __init__(self) -> None:
        from distributed import Client, LocalCluster  # noqa: PLC0415  (a bench-only peer)

        self.cluster = LocalCluster(
            n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None
        )
        self.client = Client(self.cluster)
        self.a, self.b = list(self.client.scheduler_info()["workers"])

    def run(self, kind: str, size: int) -> Any:
        submit = self.client.submit
        noop, collect = peer_nodes.noop, peer_nodes.collect
        if kind == "chain":
            future = submit(noop, None, pure=False)
            for _ in range(size - 1):
                future = submit(noop, future, pure=False)
            return future.result()
        if kind == "fork":
            source = submit(noop, None, pure=False)
            branches = [submit(noop, source, pure=False) for _ in range(size)]
            return submit(collect, branches, pure=False).result()
        if kind == "chains":
            ends = []
            for _ in range(20):
                future = submit(noop, None, pure=False)
                for _ in range(size - 1):
                    future = submit(noop, future, pure=False)
                ends.append(future)
            return self.client.gather(ends)
        made = submit(peer_nodes.make, None, size, workers=[self.a], pure=False)
        return submit(peer_nodes.size, made, workers=[self.b], pure=False).result()

    def close(self) -> None:
        self.client.close()
        self.cluster.close()


PAGE_REPORTING = Path("/sys/module/page_reporting/parameters")


def page_reporting_note() -> str | None:
    """A warning when this machine hands freed memory back to its host (a VM with free
    page reporting): touching such memory again costs a fault at the host, which
    dominates the value rows of both peers and decides them by timing alone."""
    try:
        delay_ms = int((PAGE_REPORTING / "min_free_ms").read_text())
        order = int((PAGE_REPORTING / "page_reporting_order").read_text())
    except (OSError, ValueError):
        return None
    return (
        f"note: this machine reports freed memory to its host (page_reporting_order={order},"
        f" min_free_ms={delay_ms}); fresh memory then costs a fault at the host, so the"
        " value rows measure that more than either peer (see docs/performance.md)"
    )


def interleaved(
    peers: list[Any], rows: list[tuple[str, str, int]], rounds: int
) -> dict[tuple[str, str], list[float]]:
    """Seconds of every (workload, peer), round after round; within a round each
    workload runs on every peer in turn, first ours then Dask's, then the other way
    round: a peer that runs right after the other reuses memory the other just freed
    (on this VM, memory freed a while ago costs a fault at the host to touch again),
    so a fixed order would favour the second."""
    times: dict[tuple[str, str], list[float]] = {}
    for round_number in range(rounds):
        for name, kind, size in rows:
            for peer in peers if round_number % 2 == 0 else peers[::-1]:
                took = timed(lambda peer=peer, kind=kind, size=size: peer.run(kind, size))
                times.setdefault((name, peer.name), []).append(took)
        print(f"round {round_number + 1}/{rounds} done", flush=True)
    return times


def timed(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="leave out fork-join 10,000")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="run only the workloads whose name has NAME",
    )
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])
    )
    rows = [
        row
        for row in workloads(args.quick)
        if not args.only or any(part in row[0] for part in args.only)
    ]
    before = os.getloadavg()
    with bench_settings("bench-peers") as (settings, root):
        peers: list[Any] = [Ours(settings, root), DaskPeer()]
        try:
            for peer in peers:  # warm up: pools, connections, caches
                peer.run("chain", 10)
            times = interleaved(peers, rows, args.rounds)
            per_node = {n: peers[0].redis_bytes_per_node("fork", n) for n in (200, 2_000)}
        finally:
            for peer in peers:
                peer.close()
    after = os.getloadavg()
    print(
        f"\nmedians of {args.rounds} interleaved rounds; 2 workers x 2 slots each; "
        f"load average {before[0]:.2f} before, {after[0]:.2f} after"
    )
    print(f"{'workload':18} {'somatize':>10} {'dask':>10} {'ratio':>7}  per round")
    for name, _, _ in rows:
        ours, dask = times[(name, "somatize")], times[(name, "dask")]
        each = [a / b for a, b in zip(ours, dask, strict=True)]
        print(
            f"{name:18} {statistics.median(ours):9.3f}s {statistics.median(dask):9.3f}s "
            f"{statistics.median(ours) / statistics.median(dask):7.2f}  "
            f"{min(each):.2f}-{max(each):.2f}"
        )
    for n, used in per_node.items():
        print(f"Redis kept by a finished {n}-branch fork-join: {used:.0f} bytes per node")
    note = page_reporting_note()
    if note is not None and any(kind == "value" for _, kind, _ in rows):
        print(note)


if __name__ == "__main__":
    main()
