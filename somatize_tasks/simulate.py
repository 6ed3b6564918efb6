"""A cluster on paper: Redis CPU, memory and dispatch delay from measured command costs.

Why a model and not a load test: a lab sizing a 10,000-worker cluster
cannot start one. Every Redis cost of this project is a small number of
command kinds whose rates follow from the cluster's shape, so
``rate x measured cost`` summed over them predicts what Redis will spend:

=====================  ===========================================  ===========================
what                   rate                                         cost (``Costs``)
=====================  ===========================================  ===========================
heartbeats             workers / interval + 2 per node run          ``heartbeat_us``
reaper ticks           workers / interval                           ``tick_us``
leader sweeps          1 / heartbeat TTL while runs are active      ``read_us(workers)`` +
                                                                    runs x ``repair_us(nodes)``
placement reads        runs started per second                      ``read_us(workers)``
dispatch               nodes run per second                         ``node_us``
=====================  ===========================================  ===========================

Costs are Redis CPU per call (``INFO cpu``, so networking included, not
just ``commandstats`` execution time), measured on a scratch
``redis-server`` by :func:`calibrate` from calls paced at two rates, as
real ones arrive (one by one; a burst would share wakeups and look
cheaper). Small calls turn out sub-linear: at 100 a second each pays a
whole wakeup, at 1,000 a second Redis stays warm, so their CPU is fitted as
``light_k x rate ^ light_alpha`` and floored by the burst cost per call
(what they cost when Redis is saturated with them); and, for ``node_us`` and the idle
dispatch delay, from a real run (``bench/check_simulate.py``). Memory is
per worker and per node of run state. The p99 dispatch delay is the idle
cluster's p99, stretched by Redis' utilisation (an M/M/1 queue's wait) and
by the longest single command (a full registry read blocks everyone else
while it runs) when it is frequent enough to reach the 99th percentile.
"""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from redis import Redis

from scheduler import WorkerInfo
from somatize_tasks.keys import RedisKeys
from somatize_tasks.registry import Registry
from somatize_tasks.runtime.elected import TICK_SCRIPT

#: Costs measured on the development machine by ``bench/check_simulate.py``.
COSTS_FILE = Path(__file__).with_name("simulate_costs.json")


@dataclass(frozen=True)
class Costs:
    """Redis CPU (µs per call) and memory (bytes) measured on one machine."""

    heartbeat_us: float = 28.0
    tick_us: float = 25.0
    read_base_us: float = 60.0
    read_per_worker_us: float = 0.35
    repair_base_us: float = 40.0
    repair_per_node_us: float = 0.25
    node_us: float = 900.0
    idle_cpu: float = 0.0015
    light_k: float = 1.2e-4
    celery_idle_cpu: float = 0.0005
    light_alpha: float = 0.66
    base_memory_bytes: float = 1.0e6
    worker_bytes: float = 410.0  # registry bytes per worker at 10,000 entries
    worker_bytes_small: float = 350.0  # ... at 1,000 (Redis packs small hashes tighter)
    node_bytes: float = 600.0
    idle_dispatch_p99_ms: float = 12.0
    measured_on: str = "defaults (see README)"

    def read_us(self, workers: int) -> float:
        return self.read_base_us + self.read_per_worker_us * workers

    def bytes_per_worker(self, workers: int) -> float:
        """Measured at 1,000 and 10,000 entries; log-linear between, flat outside."""
        share = min(1.0, max(0.0, math.log10(max(workers, 1) / 1000)))
        return self.worker_bytes_small + share * (self.worker_bytes - self.worker_bytes_small)

    def repair_us(self, nodes: int) -> float:
        return self.repair_base_us + self.repair_per_node_us * nodes

    @classmethod
    def load(cls, path: Path | None) -> Costs:
        if path is None:
            return cls()
        return cls(**json.loads(path.read_text()))

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")


@dataclass(frozen=True)
class Cluster:
    """The shape being simulated."""

    workers: int
    plan_size: int = 1
    runs: int = 0
    parallel: int | None = None  # nodes of one run ready at once (default: all)
    node_s: float = 1.0
    slots: int = 4
    interval_s: float = 2.0
    ttl_s: float | None = None
    celery_workers: int | None = None  # running Celery's own polling (default: all)


@dataclass
class Prediction:
    cpu: float
    memory_bytes: float
    dispatch_p99_ms: float | None
    parts: dict[str, float] = field(default_factory=dict)

    def describe(self) -> str:
        delay = ("saturated (Redis over one core)" if self.dispatch_p99_ms is None
                 else f"{self.dispatch_p99_ms:.1f} ms")
        lines = [f"Redis CPU      {self.cpu * 100:8.2f} % of one core",
                 f"Redis memory   {self.memory_bytes / 2**20:8.1f} MiB",
                 f"dispatch p99   {delay}", "CPU by source:"]
        lines += [f"  {name:16} {share * 100:8.3f} %" for name, share in self.parts.items()]
        return "\n".join(lines)


def predict(cluster: Cluster, costs: Costs) -> Prediction:
    """What Redis spends on ``cluster`` (see the module docstring)."""
    ttl_s = cluster.ttl_s or 3 * cluster.interval_s
    width = cluster.parallel or cluster.plan_size
    running = min(cluster.runs * width, cluster.workers * cluster.slots)
    node_rate = running / cluster.node_s if cluster.runs else 0.0
    passes = math.ceil(cluster.plan_size / max(1.0, running / max(1, cluster.runs)))
    run_s = passes * cluster.node_s
    starts = cluster.runs / run_s if cluster.runs else 0.0
    us = {
        "heartbeats": (cluster.workers / cluster.interval_s + 2 * node_rate) * costs.heartbeat_us,
        "reaper ticks": cluster.workers / cluster.interval_s * costs.tick_us,
        "leader sweeps": (costs.read_us(cluster.workers)
                          + cluster.runs * costs.repair_us(cluster.plan_size)) / ttl_s
        if cluster.runs else 0.0,
        "placement reads": starts * costs.read_us(cluster.workers),
        "dispatch": node_rate * costs.node_us,
    }
    # Heartbeats and ticks: wakeup-bound at low rates (the fitted power law), bound by
    # the per-command cost at high rates (measured in bursts); the larger of the two.
    light_rate = 2 * cluster.workers / cluster.interval_s + 2 * node_rate
    light_linear = (us.pop("heartbeats") + us.pop("reaper ticks")) / 1e6
    light = max(light_linear, costs.light_k * light_rate ** costs.light_alpha)
    celery = cluster.workers if cluster.celery_workers is None else cluster.celery_workers
    parts = {"idle": costs.idle_cpu, "heartbeats+ticks": light,
             "celery polling": celery * costs.celery_idle_cpu,
             **{name: value / 1e6 for name, value in us.items()}}
    cpu = sum(parts.values())
    memory = (costs.base_memory_bytes + cluster.workers * costs.bytes_per_worker(cluster.workers)
              + cluster.runs * cluster.plan_size * costs.node_bytes)
    return Prediction(cpu, memory, _dispatch_p99_ms(cluster, costs, cpu, starts, ttl_s), parts)


def _dispatch_p99_ms(
    cluster: Cluster, costs: Costs, cpu: float, starts: float, ttl_s: float
) -> float | None:
    if cpu >= 1.0:
        return None
    stretched = costs.idle_dispatch_p99_ms / (1.0 - cpu)
    longest_ms = costs.read_us(cluster.workers) / 1000
    long_rate = starts + (1 / ttl_s if cluster.runs else 0.0)
    chance = min(1.0, long_rate * longest_ms / 1000)  # a dispatch lands inside one
    return stretched + longest_ms * min(1.0, chance / 0.01)


# --- calibration ----------------------------------------------------------------------------


def _cpu_s(client: Redis[bytes]) -> float:
    info: Any = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _cost_us(client: Redis[bytes], calls: int, action: Any, threads: int = 1) -> float:
    """Redis CPU per call of ``action()`` made ``calls`` times from ``threads`` threads.

    One thread by default: real heartbeats and ticks arrive one by one, each
    waking Redis on its own, and batching several clients per wakeup would
    make them look cheaper than they are."""
    share = calls // threads
    start = _cpu_s(client)
    workers = [threading.Thread(target=lambda: [action() for _ in range(share)])
               for _ in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    return (_cpu_s(client) - start) * 1e6 / (share * threads)


def _paced_cpu(client: Redis[bytes], rate: float, seconds: float, actions: list[Any]) -> float:
    """Redis CPU (fraction of a core) while each of ``actions`` (one per client thread,
    as workers are separate clients) runs ``rate / len(actions)`` times a second."""

    def pace(action: Any) -> None:
        gap = len(actions) / rate
        began = next_at = time.monotonic()
        while next_at - began < seconds:
            action()
            next_at += gap
            pause = next_at - time.monotonic()
            if pause > 0:
                time.sleep(pause)

    threads = [threading.Thread(target=pace, args=(action,)) for action in actions]
    start, began = _cpu_s(client), time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return (_cpu_s(client) - start) / (time.monotonic() - began)


def calibrate(client: Redis[bytes], base: Costs | None = None, calls: int = 8_000) -> Costs:
    """Measure the registry, reaper and repair costs on ``client`` (a scratch server:
    its keys are flushed). Dispatch and memory-per-node costs are kept from ``base``."""
    base = base or Costs()
    client.flushdb()
    idle_start, idle_at = _cpu_s(client), time.monotonic()
    time.sleep(2.0)
    idle = (_cpu_s(client) - idle_start) / (time.monotonic() - idle_at)
    keys = RedisKeys("calibrate")
    registry = Registry(client, keys, 600.0)
    infos = [WorkerInfo(id=f"w{i:05d}", name=f"w{i:05d}@calibrate", tags=["cpu"],
                        cpu_cores=8, max_concurrent=4) for i in range(10_000)]
    sizes = {}
    for index, info in enumerate(infos, 1):
        registry.heartbeat(info)
        if index in (1_000, 10_000):
            names = [keys.workers_seen, keys.workers_info, keys.worker_tags, keys.worker_tag("cpu")]
            sizes[index] = sum(int(client.memory_usage(n) or 0) for n in names) / index
    counter = iter(range(10**9))
    client.set(keys.reaper_lease, "someone-else", px=600_000)
    tick = client.register_script(TICK_SCRIPT)
    tick_keys = [keys.reaper_lease, keys.active_runs, keys.workers_seen]

    def beat() -> None:
        registry.heartbeat(infos[next(counter) % 1000])

    def tock() -> None:
        tick(keys=tick_keys, args=["me", 6000, 6000, ""])

    def pair_on(other: Redis[bytes]) -> Any:
        own, own_tick = Registry(other, keys, 600.0), other.register_script(TICK_SCRIPT)

        def pair() -> None:
            own.heartbeat(infos[next(counter) % 1000])
            own_tick(keys=tick_keys, args=["me", 6000, 6000, ""])

        return pair

    pairs = [pair_on(Redis(connection_pool=client.connection_pool.__class__(
        **client.connection_pool.connection_kwargs))) for _ in range(4)]
    beat_us, tock_us = (_cost_us(client, calls, action, threads=4) for action in (beat, tock))
    slow, fast = (_paced_cpu(client, rate, 4.0, pairs) - idle for rate in (100.0, 1000.0))
    alpha = math.log(max(fast, 1e-9) / max(slow, 1e-9)) / math.log(10.0)
    k = max(slow, 1e-9) / 200.0**alpha  # 100 pairs a second: 200 calls
    small = Registry(client, RedisKeys("calibrate-small"), 600.0)
    for info in infos[:1000]:
        small.heartbeat(info)
    read_small = _cost_us(client, 400, small.live_infos)
    read_large = _cost_us(client, 100, registry.live_infos)
    per_worker = (read_large - read_small) / 9_000
    nodes_key = "calibrate:nodes"
    client.hset(nodes_key, mapping={f"n{i}": '{"state":"done","worker":"w1"}'
                                    for i in range(10_000)})
    repair_large = _cost_us(client, 100, lambda: client.hgetall(nodes_key))
    client.flushdb()
    return Costs(**{
        **asdict(base),
        "heartbeat_us": beat_us, "tick_us": tock_us, "light_k": k, "light_alpha": alpha,
        "read_base_us": max(0.0, read_small - 1000 * per_worker), "read_per_worker_us": per_worker,
        "repair_per_node_us": max(0.0, repair_large - base.repair_base_us) / 10_000,
        "idle_cpu": idle, "worker_bytes": sizes[10_000], "worker_bytes_small": sizes[1_000],
        "measured_on": f"calibrated {time.strftime('%Y-%m-%d %H:%M')}",
    })  # fmt: skip
