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

Costs are Redis CPU per call, measured on a scratch ``redis-server``
(:func:`somatize_tasks.sizing.calibrate.calibrate`, ``--calibrate``).
Small calls turn out sub-linear: at 100 a second each pays a whole wakeup,
at 1,000 a second Redis stays warm, so their CPU is fitted as ``light_k x
rate ^ light_alpha`` and floored by the burst cost per call (what they
cost when Redis is saturated with them). Celery's own idle polling, the
dispatch cost per node and the dispatch path come from a real run
(``bench/check_simulate.py``). Memory is per worker and per node of run
state. The p99 dispatch delay is the measured dispatch path (its
distribution) plus its Redis calls' waits in Redis' one-thread queue,
served the command mix above (:mod:`somatize_tasks.sizing.delay`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from somatize_tasks.sizing.delay import Kind, dispatch_quantile_ms

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
    #: Celery's own Redis calls per second of one idle worker (its CPU: ``celery_idle_cpu``).
    celery_idle_calls: float = 3.0
    #: The dispatch path's delay (ms), quantiles from its minimum to its maximum,
    #: measured with Redis otherwise idle (:mod:`somatize_tasks.sizing.delay`).
    path_ms: tuple[float, ...] = (1.5, 2.5, 4.0, 12.0)
    #: Round trips to Redis on one dispatch's critical path, traced with ``MONITOR`` in a
    #: steady chain (README): the result script, the dispatch record, the ``LPUSH``,
    #: the consumer's unacked record, ``mark_running`` and the reservation release.
    path_calls: float = 6.0
    #: Redis commands a dispatched node causes in all (Celery's events and acks too).
    node_calls: float = 44.0
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
        known = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in json.loads(path.read_text()).items() if k in known}
        if "path_ms" in fields:
            fields["path_ms"] = tuple(fields["path_ms"])
        return cls(**fields)

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
    #: How much of the p99 is waiting in Redis' queue (the rest is the path's own).
    dispatch_queue_ms: float | None = None

    def describe(self) -> str:
        delay = (
            "saturated (Redis over one core)"
            if self.dispatch_p99_ms is None
            else f"{self.dispatch_p99_ms:.2f} ms "
            f"({self.dispatch_queue_ms or 0.0:+.3f} ms of it waiting in Redis' queue)"
        )
        lines = [
            f"Redis CPU      {self.cpu * 100:8.2f} % of one core",
            f"Redis memory   {self.memory_bytes / 2**20:8.1f} MiB",
            f"dispatch p99   {delay}",
            "CPU by source:",
        ]
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
    sweep_rate = 1 / ttl_s if cluster.runs else 0.0
    us = {
        "heartbeats": (cluster.workers / cluster.interval_s + 2 * node_rate) * costs.heartbeat_us,
        "reaper ticks": cluster.workers / cluster.interval_s * costs.tick_us,
        "leader sweeps": (
            costs.read_us(cluster.workers) + cluster.runs * costs.repair_us(cluster.plan_size)
        )
        * sweep_rate,
        "placement reads": starts * costs.read_us(cluster.workers),
        "dispatch": node_rate * costs.node_us,
    }
    # Heartbeats and ticks: wakeup-bound at low rates (the fitted power law), bound by
    # the per-command cost at high rates (measured in bursts); the larger of the two.
    light_rate = 2 * cluster.workers / cluster.interval_s + 2 * node_rate
    light_linear = (us.pop("heartbeats") + us.pop("reaper ticks")) / 1e6
    light = max(light_linear, costs.light_k * light_rate**costs.light_alpha)
    celery = cluster.workers if cluster.celery_workers is None else cluster.celery_workers
    parts = {
        "idle": costs.idle_cpu,
        "heartbeats+ticks": light,
        "celery polling": celery * costs.celery_idle_cpu,
        **{name: value / 1e6 for name, value in us.items()},
    }
    cpu = sum(parts.values())
    memory = (
        costs.base_memory_bytes
        + cluster.workers * costs.bytes_per_worker(cluster.workers)
        + cluster.runs * cluster.plan_size * costs.node_bytes
    )
    mix: list[Kind] = [
        (light_rate, light / light_rate if light_rate else 0.0),
        (celery * costs.celery_idle_calls, costs.celery_idle_cpu / costs.celery_idle_calls),
        (sweep_rate, costs.read_us(cluster.workers) / 1e6),
        (sweep_rate * cluster.runs, costs.repair_us(cluster.plan_size) / 1e6),
        (starts, costs.read_us(cluster.workers) / 1e6),
        (node_rate * costs.node_calls, costs.node_us / costs.node_calls / 1e6),
    ]
    delay = None if cpu >= 1.0 else dispatch_quantile_ms(costs.path_ms, costs.path_calls, mix)
    alone = dispatch_quantile_ms(costs.path_ms, 0, [])
    return Prediction(cpu, memory, delay, parts, None if delay is None else delay - (alone or 0.0))
