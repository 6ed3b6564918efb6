"""Measuring :class:`~somatize_tasks.sizing.simulate.Costs` on a Redis server (``--calibrate``).

Costs are Redis CPU per call (``INFO cpu``, so networking included, not
just ``commandstats`` execution time), measured on a scratch
``redis-server`` (its keys are flushed) from calls paced at two rates, as
real ones arrive (one by one; a burst would share wakeups and look cheaper).
The dispatch path and Celery's own polling need real workers: they are
measured by ``bench/check_simulate.py`` and kept from the costs given.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import threading
import time
from dataclasses import asdict
from typing import Any

from redis import Redis

from scheduler import WorkerInfo
from somatize_tasks.config.keys import RedisKeys
from somatize_tasks.runtime.recovery.elected import TICK_SCRIPT
from somatize_tasks.sizing.simulate import Costs
from somatize_tasks.workers.registry import Registry

log = logging.getLogger(__name__)


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
    workers = [
        threading.Thread(target=lambda: [action() for _ in range(share)]) for _ in range(threads)
    ]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    return (_cpu_s(client) - start) * 1e6 / (share * threads)


def _pace(pool: Any, prefix: str, rate: float, seconds: float, done: Any) -> None:
    """One client process: heartbeat+tick pairs at ``rate`` a second for ``seconds``,
    as the non-leading workers of a cluster send them (the lease is someone else's)."""
    client: Redis[bytes] = Redis(connection_pool=pool.__class__(**pool.connection_kwargs))
    keys = RedisKeys(prefix)
    registry, tick = Registry(client, keys, 600.0), client.register_script(TICK_SCRIPT)
    tick_keys = [keys.reaper_lease, keys.active_runs, keys.workers_seen]
    infos = [_info(i) for i in range(1000)]
    began = next_at = time.monotonic()
    count = 0
    while time.monotonic() - began < seconds:
        registry.heartbeat(infos[count % len(infos)])
        tick(keys=tick_keys, args=["me", 6000, 6000, ""])
        count += 1
        next_at += 1 / rate
        pause = next_at - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        else:  # late: skip the slot rather than send a burst Redis would serve cheaper
            next_at = time.monotonic()
    with done.get_lock():
        done.value += count


def _paced_cpu(
    client: Redis[bytes], prefix: str, rate: float, seconds: float, processes: int = 4
) -> tuple[float, float]:
    """Redis CPU (fraction of a core) while ``processes`` client processes (workers are
    separate processes, each its own client) send ``rate`` heartbeat+tick pairs a
    second between them, and the rate they really reached (a loaded machine may not
    keep up)."""
    ctx = multiprocessing.get_context("fork")
    done = ctx.Value("q", 0)
    pool = client.connection_pool
    procs = [
        ctx.Process(target=_pace, args=(pool, prefix, rate / processes, seconds, done))
        for _ in range(processes)
    ]
    start, began = _cpu_s(client), time.monotonic()
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    took = time.monotonic() - began
    return (_cpu_s(client) - start) / took, done.value / took


def _info(index: int) -> WorkerInfo:
    return WorkerInfo(
        id=f"w{index:05d}",
        name=f"w{index:05d}@calibrate",
        tags=["cpu"],
        cpu_cores=8,
        max_concurrent=4,
    )


#: Heartbeat+tick pairs a second the light calls are paced at: 100 to 2,000 workers.
PACED_RATES = (50.0, 200.0, 1000.0)


def fit_power(points: list[tuple[float, float]], idle: float) -> tuple[float, float]:
    """``(k, alpha)`` of ``cpu = k * calls ^ alpha`` fitted (least squares in logs) to
    ``(cpu, pairs a second)`` measurements, less ``idle``; a pair is two calls."""
    xs = [math.log(2 * rate) for _, rate in points]
    ys = [math.log(max(cpu - idle, 1e-9)) for cpu, _ in points]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    alpha = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mean_x) ** 2 for x in xs
    )
    return math.exp(mean_y - alpha * mean_x), alpha


def light_calls(
    client: Redis[bytes], idle: float, prefix: str = "calibrate-light", seconds: float = 4.0
) -> tuple[float, float]:
    """``(light_k, light_alpha)`` of heartbeats and ticks on ``client`` now: a registry
    of 1,000 under ``prefix`` (removed after), whose lease someone else holds, paced at
    :data:`PACED_RATES` from separate processes; ``idle`` is Redis' CPU without them.

    Redis' CPU per small call moves with what the machine does (a wakeup on an idle
    core costs more), so a check measures this right before the figures it explains."""
    keys = RedisKeys(prefix)
    client.set(keys.reaper_lease, "someone-else", px=600_000)
    registry = Registry(client, keys, 600.0)
    for index in range(1000):
        registry.heartbeat(_info(index))
    points = [_paced_cpu(client, prefix, rate, seconds) for rate in PACED_RATES]
    log.info(
        "light calls: %s", ", ".join(f"{2 * r:.0f}/s: {(c - idle) * 100:.2f} %" for c, r in points)
    )
    for name in list(client.scan_iter(match=f"{prefix}:*")):
        client.delete(name)
    return fit_power(points, idle)


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
    infos = [_info(i) for i in range(10_000)]
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

    beat_us, tock_us = (_cost_us(client, calls, action, threads=4) for action in (beat, tock))
    k, alpha = light_calls(client, idle)
    small = Registry(client, RedisKeys("calibrate-small"), 600.0)
    for info in infos[:1000]:
        small.heartbeat(info)
    read_small = _cost_us(client, 400, small.live_infos)
    read_large = _cost_us(client, 100, registry.live_infos)
    per_worker = (read_large - read_small) / 9_000
    nodes_key = "calibrate:nodes"
    client.hset(
        nodes_key, mapping={f"n{i}": '{"state":"done","worker":"w1"}' for i in range(10_000)}
    )
    repair_large = _cost_us(client, 100, lambda: client.hgetall(nodes_key))
    client.flushdb()
    return Costs(
        **{
            **asdict(base),
            "heartbeat_us": beat_us,
            "tick_us": tock_us,
            "light_k": k,
            "light_alpha": alpha,
            "read_base_us": max(0.0, read_small - 1000 * per_worker),
            "read_per_worker_us": per_worker,
            "repair_per_node_us": max(0.0, repair_large - base.repair_base_us) / 10_000,
            "idle_cpu": idle,
            "worker_bytes": sizes[10_000],
            "worker_bytes_small": sizes[1_000],
            "measured_on": f"calibrated {time.strftime('%Y-%m-%d %H:%M')}",
        }
    )
