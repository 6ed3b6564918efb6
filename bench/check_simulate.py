"""Check ``somatize-tasks simulate`` against real clusters of 100 and 1,000 fake workers.

All in one run, because this machine is shared and its load moves by the
second, on a ``redis-server`` started for the purpose (and a second one,
the *decoy*):

1. :func:`somatize_tasks.sizing.calibrate.calibrate` measures the
   registry, reaper and repair costs on it, right before they are used.
2. Two real workers start. Idle, their Redis CPU and calls give Celery's
   own polling per worker; two unfused chains give the dispatch's Redis CPU
   and calls per node, and the path's delays saved with the costs.
3. For 100 and then 1,000 fake workers (``bench/fake_workers.py``: real
   heartbeats and reaper ticks, many per process): Redis CPU with the fakes
   on it against off it, and the registry's memory; then ``--rounds``
   unfused ``CHAIN``-node chains on the real workers while the fakes switch
   every ~0.25 s between the measured Redis and the decoy
   (``bench/interleave.py``). On the decoy they cost this machine's cores
   just as much, so the two states differ only in what the measured Redis
   serves, which is what the model is about. Right before, with the fakes on
   the decoy, the heartbeat and tick costs are measured again (paced calls:
   what a small call costs Redis moves with the machine's load).

**The dispatch delay** of a node is its start on a worker minus its
predecessor's end (the moment it became ready): one publish, one broker
delivery, one task start (``fuse_chains`` off, so every node is its own
task); each sample is sorted by the fakes' state at its midpoint. The
simulation takes the delays measured with the fakes on the decoy as the
path's distribution and adds the waits of the path's Redis round trips in
the measured Redis' queue with the fakes' command mix
(:mod:`somatize_tasks.sizing.delay`), for the heartbeat rate the fakes
really reached. The table shows the p99 of all samples and the median
(and range) of the rounds' p99s: with about 250 samples a state a round,
those move by 2-4x between rounds, so the first is the one to judge by.

What it measured is written to ``somatize_tasks/sizing/simulate_costs.json`` (the
CLI's default costs) unless ``--no-save``.

    python -m bench.check_simulate [--seconds 10] [--rounds 12] [--no-save]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path

from redis import Redis

from bench.fake_workers import FakeWorkers, fake_workers, redis_cpu_s
from bench.interleave import split, switching
from somatize_tasks import submit_plan
from somatize_tasks.config.keys import RedisKeys
from somatize_tasks.config.settings import Settings
from somatize_tasks.sizing.calibrate import calibrate, light_calls
from somatize_tasks.sizing.delay import path_quantiles
from somatize_tasks.sizing.simulate import COSTS_FILE, Cluster, Costs, predict
from testkit.services import start_redis_server
from testkit.workers import WorkerFactory

CHAIN = 500
IDS = ["rt_add" if i == 0 else f"rt_add_{i + 1}" for i in range(CHAIN)]
PLAN = {"Sequence": [{"Execute": {"node_id": node_id}} for node_id in IDS]}


@dataclasses.dataclass
class Chain:
    """One chain's dispatches (ready, started: wall-clock s) and what Redis did meanwhile."""

    spans: list[tuple[float, float]]
    seconds: float
    cpu_s: float
    calls: int

    @property
    def delays(self) -> list[float]:
        return [(started - ready) * 1000 for ready, started in self.spans]


def redis_calls(client: Redis[bytes]) -> int:
    return int(client.info("stats")["total_commands_processed"])


def run_chain(settings: Settings, client: Redis[bytes]) -> Chain:
    """Run the chain; its delays: each node's start minus its predecessor's end."""
    cpu, calls, start = redis_cpu_s(client), redis_calls(client), time.perf_counter()
    run = submit_plan(PLAN, input=0, settings=settings, require_workers=True)
    assert run.wait(timeout=300) == CHAIN
    seconds = time.perf_counter() - start
    spent, made = redis_cpu_s(client) - cpu, redis_calls(client) - calls
    nodes = run.status().nodes
    ordered = [nodes[node_id] for node_id in IDS]
    spans = [
        (a.ended_at, b.started_at)
        for a, b in itertools.pairwise(ordered)
        if a.ended_at and b.started_at
    ]
    return Chain(spans, seconds, spent, made)


def p99(values: list[float]) -> float:
    """Interpolated between order statistics as the model's quantiles are
    (:func:`~somatize_tasks.sizing.delay.path_quantiles`): with a few hundred
    samples the usual "exclusive" definition lands a whole sample higher."""
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def registry_bytes(client: Redis[bytes], prefix: str) -> int:
    keys = RedisKeys(prefix)
    names = [
        keys.workers_seen,
        keys.workers_info,
        keys.worker_tags,
        keys.worker_tag("cpu"),
        keys.worker_tag("gpu"),
    ]
    return sum(int(client.memory_usage(name) or 0) for name in names)


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (5 min {five:.2f}) on {os.cpu_count()} cores"


def idle_rates(client: Redis[bytes], seconds: float) -> tuple[float, float]:
    """Redis CPU (fraction of a core) and calls per second over the next ``seconds``."""
    cpu, calls, start = redis_cpu_s(client), redis_calls(client), time.monotonic()
    time.sleep(seconds)
    took = time.monotonic() - start
    return (redis_cpu_s(client) - cpu) / took, (redis_calls(client) - calls) / took


def path_costs(costs: Costs, paths: list[Chain], background: float, calls_s: float) -> Costs:
    """Costs with the dispatch path, Redis CPU and calls per node measured by ``paths``
    (chains with Redis otherwise idle)."""
    seconds = sum(chain.seconds for chain in paths)
    spent = sum(chain.cpu_s for chain in paths) - background * seconds
    made = sum(chain.calls for chain in paths) - calls_s * seconds
    nodes = CHAIN * len(paths)
    return dataclasses.replace(
        costs,
        path_ms=tuple(path_quantiles([d for chain in paths for d in chain.delays])),
        node_calls=max(1.0, made / nodes),
        node_us=max(1.0, spent / nodes * 1e6),
    )


def check_size(
    client: Redis[bytes],
    settings: Settings,
    decoy: Settings,
    costs: Costs,
    count: int,
    args: argparse.Namespace,
) -> None:
    """Measure ``count`` fakes and print measured against simulated."""
    with fake_workers(settings, count, 900, decoy=decoy) as fakes:
        time.sleep(3)
        memory = registry_bytes(client, "sim")
        costs = recalibrate(client, fakes, costs)
        cpu = [paired_cpu(client, fakes, args.seconds / 2) for _ in range(2)]
        with switching(fakes) as switches:
            chains = [run_chain(settings, client) for _ in range(args.rounds)]
            rounds = [(chain, *split(chain.spans, switches)) for chain in chains]
    reached = statistics.median(rate for _, _, rate in cpu) * settings.heartbeat_interval_s
    quiet = dataclasses.replace(
        costs,
        celery_idle_cpu=statistics.median(max(0.0, off - costs.idle_cpu) / 2 for off, _, _ in cpu),
    )
    simulated_cpu = [
        predict(Cluster(workers=round(reached) + 2, celery_workers=2), quiet).cpu * 100
    ]
    print(
        f"\n{count} fakes asked, {reached:.0f} heartbeating in time ({reached / count:.0%}); "
        f"{load()}"
    )
    print_row("Redis CPU, no run %", [on * 100 for _, on, _ in cpu], simulated_cpu)
    added = statistics.median(on - off for off, on, _ in cpu)
    modelled = predict(Cluster(workers=round(reached), celery_workers=0), costs)
    print(
        f"{'':>24}(the fakes' own share: {added * 100:.2f} % measured, on minus on the "
        f"decoy; {modelled.parts['heartbeats+ticks'] * 100:.2f} % modelled)"
    )
    print_row(
        "registry memory KiB",
        [memory / 1024],
        [(count + 2) * costs.bytes_per_worker(count + 2) / 1024],
    )
    paths = [d for _, path, _ in rounds for d in path]
    loaded = [d for _, _, on in rounds for d in on]
    node_s = sum(chain.seconds for chain in chains) / CHAIN / len(chains)
    print_row(
        f"dispatch p99 ms, {len(loaded)}",
        [p99(loaded)],
        [simulate_p99(costs, paths, node_s, reached)],
    )
    print_row(
        "rounds' p99s: median",
        [p99(on) for _, _, on in rounds],
        [simulate_p99(costs, path, chain.seconds / CHAIN, reached) for chain, path, _ in rounds],
    )
    print(
        f"{'':>24}(on the decoy: p99 {p99(paths):.2f} ms of {len(paths)}; "
        f"{len(rounds)} rounds of {CHAIN - 1})"
    )


def recalibrate(client: Redis[bytes], fakes: FakeWorkers, costs: Costs) -> Costs:
    """The heartbeat and tick costs measured again now, with the fakes on the decoy
    (what the calls cost moves with the machine's load, minute by minute)."""
    fakes.pause()
    time.sleep(0.2)
    quiet = idle_rates(client, 2.0)[0]
    k, alpha = light_calls(client, quiet)
    fakes.resume()
    time.sleep(3.0)  # longer than a heartbeat TTL off: every fake back in the registry
    return dataclasses.replace(costs, light_k=k, light_alpha=alpha)


def paired_cpu(
    client: Redis[bytes], fakes: FakeWorkers, seconds: float
) -> tuple[float, float, float]:
    """Redis CPU with the fakes paused, then heartbeating, and their pairs a second.

    Paused for less than a heartbeat TTL, so no entry expires meanwhile."""
    fakes.pause()
    time.sleep(0.2)
    off = idle_rates(client, min(seconds, 3.0))[0]
    fakes.resume()
    time.sleep(0.5)
    beats, start = fakes.beats, time.monotonic()
    on = idle_rates(client, seconds)[0]
    return off, on, (fakes.beats - beats) / (time.monotonic() - start)


def simulate_p99(costs: Costs, path: list[float], node_s: float, fakes: float) -> float:
    """The simulated p99 with the fakes on the measured Redis: the delays measured while
    they were on the decoy (the path, on an equally busy machine) plus the waits in
    the measured Redis' queue with their command mix."""
    own = dataclasses.replace(costs, path_ms=tuple(path_quantiles(path)))
    cluster = Cluster(
        workers=round(fakes) + 2,
        plan_size=CHAIN,
        runs=1,
        parallel=1,
        node_s=node_s,
        celery_workers=2,
    )
    return predict(cluster, own).dispatch_p99_ms or float("inf")


def print_row(what: str, measured: list[float], simulated: list[float]) -> None:
    mid_measured, mid_simulated = statistics.median(measured), statistics.median(simulated)
    error = (mid_simulated - mid_measured) / mid_measured * 100
    spread = f"  (measured {min(measured):.2f}-{max(measured):.2f})" if len(measured) > 1 else ""
    print(f"{what:>24} {mid_measured:>10.2f} {mid_simulated:>10.2f} {error:>+6.0f}%{spread}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--no-save", action="store_true", help=f"Do not write {COSTS_FILE.name}.")
    args = parser.parse_args()
    logging.basicConfig(format="%(message)s")
    logging.getLogger("somatize_tasks.sizing.calibrate").setLevel(logging.INFO)
    proc, port = start_redis_server()
    decoy_proc, decoy_port = start_redis_server()
    root = Path(tempfile.mkdtemp(prefix="check-simulate-"))
    try:
        url = f"redis://127.0.0.1:{port}/0"
        client: Redis[bytes] = Redis.from_url(url)
        print(f"calibrating on {url}; {load()}")
        costs = calibrate(client)
        settings = Settings(
            redis_url=url,
            key_prefix="sim",
            store_kind="local",
            store_dir=root / "store",
            cache_dir=root / "cache",
            heartbeat_interval_s=2.0,
            worker_id="sim-producer",
            fuse_chains=False,
            content_cache=False,  # calibration times real computations, never cache hits
        )
        factory = WorkerFactory(settings, root)
        try:
            for name in ("a", "b"):
                factory.start(name, tags="cpu", nodes="testkit.nodes.run_nodes")
            decoy = settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{decoy_port}/0"})
            compare(client, settings, decoy, costs, args)
        finally:
            factory.close()
    finally:
        for server in (proc, decoy_proc):
            server.kill()
            server.wait()


def compare(
    client: Redis[bytes],
    settings: Settings,
    decoy: Settings,
    costs: Costs,
    args: argparse.Namespace,
) -> None:
    run_chain(settings, client)  # warm up
    idle = idle_rates(client, min(5.0, args.seconds))
    costs = measure_celery_from(costs, idle)
    memory = float(client.info("memory")["used_memory"])
    costs = path_costs(costs, [run_chain(settings, client) for _ in range(2)], *idle)
    # What a finished run leaves in Redis per node until it expires (its working state
    # is deleted when it ends).
    node_bytes = (float(client.info("memory")["used_memory"]) - memory) / (2 * CHAIN)
    costs = dataclasses.replace(costs, node_bytes=max(0.0, node_bytes))
    print(
        f"dispatch: {costs.node_us:.0f} us of Redis CPU and {costs.node_calls:.1f} calls "
        f"a node ({costs.path_calls:.0f} round trips on the path); Celery idle: "
        f"{costs.celery_idle_cpu * 100:.3f} % of a core and {costs.celery_idle_calls:.1f} "
        f"calls/s a worker; a finished run keeps {costs.node_bytes:.0f} bytes a node"
    )
    costs = dataclasses.replace(
        costs,
        measured_on=f"{costs.measured_on}; dispatch path from "
        f"{2 * (CHAIN - 1)} delays of {CHAIN}-node chains on 2 workers, "
        f"{load()}",
    )
    print(f"{'':>24} {'measured':>10} {'simulated':>10} {'error':>7}")
    for count in (100, 1_000):
        check_size(client, settings, decoy, costs, count, args)
    if not args.no_save:
        costs.save(COSTS_FILE)
        print(f"\nwrote {COSTS_FILE}")


def measure_celery_from(costs: Costs, idle: tuple[float, float]) -> Costs:
    """Celery's own polling per idle worker, from two idle real workers' Redis use:
    less Redis' own idle CPU and their heartbeats and ticks at the per-call cost (the
    fitted power law is for hundreds of calls a second, not two)."""
    cpu, calls = idle
    beats = 2 * 2 / 2.0  # two workers' heartbeats and ticks a second
    ours = costs.idle_cpu + beats / 2 * (costs.heartbeat_us + costs.tick_us) / 1e6
    return dataclasses.replace(
        costs,
        celery_idle_cpu=max(0.0, cpu - ours) / 2,
        celery_idle_calls=max(0.5, (calls - beats) / 2),
    )


if __name__ == "__main__":
    main()
