"""Across hosts that share nothing but 1 Gbit/s links: somatize-tasks against the
physical limit and against Dask distributed on the same hosts.

A :class:`~testkit.hosts.HostCluster` of three hosts (network namespaces on a
bridge, each link shaped with ``tc``, a private ``/dev/shm`` and directories
each; Redis and moto's S3 on the bridge). On it:

- **64 MiB edge**: a NumPy value made on host ``a`` and read on host ``b``
  (``peer_make`` then ``peer_size``), as one run of ours (direct transfers:
  ``SOMATIZE_TRANSFER=auto``, a message key) and as two Dask tasks pinned to
  the workers of ``a`` and ``b``; against a **plain socket copy** of the same
  64 MiB from ``a`` to ``b`` (:mod:`bench.hosts_copy`: memory to memory, no disk,
  no hashing). ``--with-s3`` adds our edge with ``SOMATIZE_TRANSFER=s3``.
- **fork-join 200** and **20 chains x 10** of no-ops, placed across the hosts
  (ours by the scheduler, Dask's by its own).

Dask's scheduler listens on the bridge, one Dask worker per host (2 threads;
ours: one worker per host, 2 slots). Rounds are interleaved (every workload on
every peer, the peers' order alternating each round); each cell is the median
of ``--rounds`` rounds, each ratio ours over the other's median, with the range
of the rounds' own ratios and the load average before and after. Needs root,
iproute2 and util-linux (what the multi-host tests need).

    sudo python -m bench.bench_hosts [--rounds 5] [--rate 1gbit] [--with-s3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from bench.bench_peers import chains, fork_join
from somatize_tasks import submit_plan
from testkit.hosts import HostCluster, unavailable_reason
from testkit.hosts.services import free_port_on
from testkit.nodes import peer_nodes
from testkit.plans import ex, remote, seq
from testkit.services import wait_for

MIB = 1 << 20
EDGE = 64 * MIB
HOSTS = ("a", "b", "c")
KEY = "bench-hosts-key-" + "b" * 24
NODES = "testkit.nodes.peer_nodes"
REPO = Path(__file__).resolve().parents[1]


def edge_plan() -> dict[str, Any]:
    return seq(remote("on-a", ex("peer_make")), remote("on-b", ex("peer_size")))


class Ours:
    """One worker per host with a message key (direct transfers on)."""

    def __init__(self, cluster: HostCluster, transfer: str, name: str) -> None:
        self.name = name
        self.settings = cluster.settings(
            key_prefix=f"{cluster.key_prefix}{transfer}",
            message_key=SecretStr(KEY),
            transfer=transfer,
            # Each host's caches live in its 2 GiB tmpfs: a forgotten run's values go
            # with the next sweep once 30 s old (a week by default).
            run_ttl_s=30,
            gc_interval_s=5.0,
        )
        started = [
            cluster.start_worker(
                host,
                name=f"{transfer}{host}",
                tags=f"cpu,on-{host}",
                nodes=NODES,
                settings=self.settings,
                wait=False,
            )
            for host in HOSTS
        ]
        for worker in started:
            cluster.wait_live(worker)

    def run(self, kind: str) -> Any:
        params: dict[str, Any] = {}
        if kind == "edge":
            plan, params = edge_plan(), {"peer_make": {"n_bytes": EDGE}}
        elif kind == "fork":
            plan = fork_join(200)
        else:
            plan = chains(20, 10)
        run = submit_plan(plan, params=params, settings=self.settings, require_workers=True)
        try:
            return run.wait(timeout=600)
        finally:
            run.forget()

    def close(self) -> None:
        """The cluster stops the workers."""


class DaskPeer:
    """A Dask scheduler on the bridge and one Dask worker per host."""

    name = "dask"

    def __init__(self, cluster: HostCluster) -> None:
        from distributed import Client  # noqa: PLC0415  (a bench-only peer)

        assert cluster.root is not None
        address = cluster.bridge_address
        port = free_port_on(address)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.procs = [
            _spawn(
                [
                    sys.executable,
                    "-m",
                    "distributed.cli.dask_scheduler",
                    "--host",
                    address,
                    "--port",
                    str(port),
                    "--no-dashboard",
                ],
                cluster.root / "logs" / "dask-scheduler.log",
                env,
            )
        ]
        scheduler = f"tcp://{address}:{port}"
        for host in HOSTS:
            self.procs.append(
                cluster.hosts[host].popen(
                    [
                        sys.executable,
                        "-m",
                        "distributed.cli.dask_worker",
                        scheduler,
                        "--name",
                        host,
                        "--nthreads",
                        "2",
                        "--no-dashboard",
                        "--no-nanny",
                        "--host",
                        cluster.hosts[host].address,
                    ],
                    log_path=cluster.root / "logs" / f"dask-worker-{host}.log",
                    env=env,
                    cwd=REPO,
                )
            )
        self.client = Client(scheduler, timeout=60)
        self.client.wait_for_workers(len(HOSTS), timeout=120)
        by_name = {w["name"]: a for a, w in self.client.scheduler_info()["workers"].items()}
        self.a, self.b = by_name["a"], by_name["b"]

    def run(self, kind: str) -> Any:
        submit = self.client.submit
        noop, collect = peer_nodes.noop, peer_nodes.collect
        if kind == "edge":
            made = submit(peer_nodes.make, None, EDGE, workers=[self.a], pure=False)
            return submit(peer_nodes.size, made, workers=[self.b], pure=False).result()
        if kind == "fork":
            source = submit(noop, None, pure=False)
            branches = [submit(noop, source, pure=False) for _ in range(200)]
            return submit(collect, branches, pure=False).result()
        ends = []
        for _ in range(20):
            future = submit(noop, None, pure=False)
            for _ in range(9):
                future = submit(noop, future, pure=False)
            ends.append(future)
        return self.client.gather(ends)

    def close(self) -> None:
        self.client.close()
        for proc in self.procs:
            proc.kill()
            proc.wait(10)


class PlainCopy:
    """64 MiB from host ``a`` to host ``b`` over a bare socket (:mod:`bench.hosts_copy`)."""

    name = "plain"

    def __init__(self, cluster: HostCluster) -> None:
        assert cluster.root is not None
        self.cluster = cluster
        self.port = 47000
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.receiver = cluster.hosts["b"].popen(
            [sys.executable, "-m", "bench.hosts_copy", "recv", str(self.port)],
            log_path=cluster.root / "logs" / "plain-recv.log",
            env=env,
            cwd=REPO,
        )
        self.target = cluster.hosts["b"].address
        assert wait_for(self._listening, 30), "the plain receiver did not start"

    def _listening(self) -> bool:
        try:
            self.seconds()
            return True
        except Exception:
            return False

    def seconds(self) -> float:
        """One copy, timed by the sender (its interpreter's start is not counted)."""
        done = self.cluster.hosts["a"].run(
            [
                sys.executable,
                "-m",
                "bench.hosts_copy",
                "send",
                self.target,
                str(self.port),
                str(EDGE),
            ],
            timeout_s=120,
        )
        return float(done.stdout.strip().splitlines()[-1])

    def close(self) -> None:
        self.receiver.kill()
        self.receiver.wait(10)


def _spawn(argv: list[str], log: Path, env: dict[str, str]) -> Any:
    import subprocess  # noqa: PLC0415

    with log.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)


def timed(action: Callable[[], Any]) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def measure(
    peers: list[Any], plain: PlainCopy, rows: list[tuple[str, str]], rounds: int
) -> dict[tuple[str, str], list[float]]:
    times: dict[tuple[str, str], list[float]] = {}
    for number in range(rounds):
        for name, kind in rows:
            order = peers if number % 2 == 0 else peers[::-1]
            if kind == "edge":
                times.setdefault((name, "plain"), []).append(plain.seconds())
            for peer in order:
                took = timed(lambda peer=peer, kind=kind: peer.run(kind))
                times.setdefault((name, peer.name), []).append(took)
        print(f"round {number + 1}/{rounds} done", flush=True)
    return times


def report(
    times: dict[tuple[str, str], list[float]], rows: list[tuple[str, str]], peers: list[Any]
) -> None:
    names = [p.name for p in peers]
    for name, _ in rows:
        cells = {peer: times[(name, peer)] for peer in [*names, "plain"] if (name, peer) in times}
        shown = "  ".join(f"{p} {statistics.median(t):.3f}s" for p, t in cells.items())
        print(f"{name:16} {shown}")
        ours = cells["somatize"]
        for other in [n for n in cells if n != "somatize"]:
            each = [a / b for a, b in zip(ours, cells[other], strict=True)]
            print(
                f"{'':16}   somatize / {other}: "
                f"{statistics.median(ours) / statistics.median(cells[other]):.2f} "
                f"(rounds {min(each):.2f}-{max(each):.2f})"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rate", default="1gbit", help="tc rate of every host's link")
    parser.add_argument("--with-s3", action="store_true", help="our edge through S3 too")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="KIND",
        help="edge, fork or chains (default: all)",
    )
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason is not None:
        raise SystemExit(f"no multi-host cluster on this machine: {reason}")
    rows = [("64 MiB edge", "edge"), ("fork-join 200", "fork"), ("20 chains x 10", "chains")]
    rows = [r for r in rows if not args.only or r[1] in args.only]
    before = os.getloadavg()
    with HostCluster(HOSTS, rate=args.rate) as cluster:
        peers: list[Any] = [Ours(cluster, "auto", "somatize"), DaskPeer(cluster)]
        if args.with_s3:
            peers.append(Ours(cluster, "s3", "somatize-s3"))
        plain = PlainCopy(cluster)
        try:
            for peer in peers:  # warm up: pools, connections, imports
                peer.run("chains")
                peer.run("edge")
            times = measure(peers, plain, rows, args.rounds)
        finally:
            plain.close()
            for peer in peers:
                peer.close()
    after = os.getloadavg()
    print(
        f"\nmedians of {args.rounds} interleaved rounds; hosts {', '.join(HOSTS)} on "
        f"{args.rate} links; load average {before[0]:.2f} before, {after[0]:.2f} after "
        f"({os.cpu_count()} cores)"
    )
    report(times, rows, peers)


if __name__ == "__main__":
    main()
