"""Measuring :class:`~somatize_tasks.simulate.Costs` on a Redis server (``--calibrate``).

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
import threading
import time
from dataclasses import asdict
from typing import Any

from redis import Redis

from scheduler import WorkerInfo
from somatize_tasks.keys import RedisKeys
from somatize_tasks.registry import Registry
from somatize_tasks.runtime.elected import TICK_SCRIPT
from somatize_tasks.simulate import Costs

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
    workers = [threading.Thread(target=lambda: [action() for _ in range(share)])
               for _ in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    return (_cpu_s(client) - start) * 1e6 / (share * threads)


def _paced_cpu(client: Redis[bytes], rate: float, seconds: float, actions: list[Any]
               ) -> tuple[float, float]:
    """Redis CPU (fraction of a core) while each of ``actions`` (one per client thread,
    as workers are separate clients) runs ``rate / len(actions)`` times a second, and
    the rate they really reached (a loaded machine may not keep up)."""
    done = [0] * len(actions)

    def pace(index: int, action: Any) -> None:
        gap = len(actions) / rate
        began = next_at = time.monotonic()
        while time.monotonic() - began < seconds:
            action()
            done[index] += 1
            next_at += gap
            pause = next_at - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            else:  # late: skip the slot rather than send a burst Redis would serve cheaper
                next_at = time.monotonic()

    threads = [threading.Thread(target=pace, args=pair) for pair in enumerate(actions)]
    start, began = _cpu_s(client), time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    took = time.monotonic() - began
    return (_cpu_s(client) - start) / took, sum(done) / took


#: Heartbeat+tick pairs a second the light calls are paced at: 100 to 2,000 workers.
PACED_RATES = (50.0, 200.0, 1000.0)


def fit_power(points: list[tuple[float, float]], idle: float) -> tuple[float, float]:
    """``(k, alpha)`` of ``cpu = k * calls ^ alpha`` fitted (least squares in logs) to
    ``(cpu, pairs a second)`` measurements, less ``idle``; a pair is two calls."""
    xs = [math.log(2 * rate) for _, rate in points]
    ys = [math.log(max(cpu - idle, 1e-9)) for cpu, _ in points]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    alpha = (sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
             / sum((x - mean_x) ** 2 for x in xs))  # fmt: skip
    return math.exp(mean_y - alpha * mean_x), alpha


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
    points = [_paced_cpu(client, rate, 4.0, pairs) for rate in PACED_RATES]
    log.info("light calls: %s", ", ".join(f"{2 * r:.0f}/s: {c * 100:.2f} %" for c, r in points))
    k, alpha = fit_power(points, idle)
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
