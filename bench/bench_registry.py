"""The registry at scale: read times, and Redis CPU with 100 and 1,000 idle workers.

1. ``live_workers()`` with 1, 100, 1,000 and 10,000 registered workers,
   heartbeating from a background thread (each once per ``--interval-s``,
   spread evenly, as fast as one thread can for the largest sizes), so the
   reads compete with writes. Each read is one round trip (a pipelined
   ``TIME`` + ``HVALS``). Median and 95th percentile of ``--reads`` calls.
2. A tag-filtered read (``live(tags=["rare"])``, at most 100 workers carry it)
   with 1,000 and 10,000 workers registered: its cost must not grow with
   the others.
3. Redis CPU with 100 and 1,000 fake idle workers (``bench/fake_workers.py``:
   each does a real heartbeat and a real reaper tick per interval) and no
   runs, on a ``redis-server`` started for the purpose, from ``INFO cpu``
   deltas; an idle server measured just before is the baseline.

    python -m bench.bench_registry [--redis-url URL] [--reads 100] [--cpu-seconds 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
import uuid

from redis import Redis

from bench.fake_workers import command_costs, fake_workers, measure_redis_cpu
from scheduler import WorkerInfo
from somatize_tasks import live_workers
from somatize_tasks.config.settings import Settings
from somatize_tasks.workers.registry import Registry
from testkit.services import start_redis_server

SIZES = (1, 100, 1_000, 10_000)
CPU_SIZES = (100, 1_000)


def simulate(registry: Registry, count: int, interval_s: float, stop: threading.Event) -> int:
    """Heartbeat ``count`` workers, each once per interval, until ``stop``; returns writes."""
    infos = [
        WorkerInfo(
            id=f"sim-{index:05d}",
            name=f"sim-{index:05d}@bench",
            tags=(["gpu"] if index % 4 == 0 else ["cpu"]) + (["rare"] if index < 100 else []),
            gpu=index % 4 == 0,
            cpu_cores=8,
            active_jobs=index % 3,
            max_concurrent=4,
        )
        for index in range(count)
    ]
    for info in infos:  # everyone is live before timing starts
        registry.heartbeat(info)
    writes, gap = 0, interval_s / count
    while not stop.is_set():
        for info in infos:
            if stop.wait(gap):
                break
            registry.heartbeat(info)
            writes += 1
    return writes


def bench(
    redis_url: str, count: int, reads: int, interval_s: float
) -> tuple[float, float, int, float]:
    """(median ms, p95 ms, workers found, median ms of the 'rare' tag read)."""
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    settings = Settings(redis_url=redis_url, key_prefix=prefix, heartbeat_interval_s=interval_s)
    writer = Registry.from_settings(settings)
    reader = Registry.from_settings(settings)
    stop = threading.Event()
    thread = threading.Thread(target=simulate, args=(writer, count, interval_s, stop))
    thread.start()
    time.sleep(0.2)
    while len(reader.live()) < count:
        time.sleep(0.05)
    timings = []
    try:
        for _ in range(reads):
            start = time.perf_counter()
            workers = live_workers(reader)
            timings.append((time.perf_counter() - start) * 1000)
            assert len(workers) == count, len(workers)
        tagged = []
        for _ in range(reads):
            start = time.perf_counter()
            rare = reader.live(tags=["rare"])
            tagged.append((time.perf_counter() - start) * 1000)
            assert len(rare) == min(count, 100)
    finally:
        stop.set()
        thread.join()
        client: Redis[bytes] = reader.client
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            client.delete(key)
    timings.sort()
    p95 = timings[max(0, int(len(timings) * 0.95) - 1)]
    return statistics.median(timings), p95, len(workers), statistics.median(tagged)


def cpu(count: int, seconds: float, interval_s: float) -> tuple[float, float, float]:
    """(idle Redis CPU, Redis CPU with ``count`` fakes, heartbeats/s), fractions of a core."""
    proc, port = start_redis_server()
    try:
        settings = Settings(
            redis_url=f"redis://127.0.0.1:{port}/0",
            key_prefix="cpu-bench",
            heartbeat_interval_s=interval_s,
            store_kind="local",
        )
        client: Redis[bytes] = Redis.from_url(settings.redis_url)
        idle = measure_redis_cpu(client, min(5.0, seconds / 2))
        with fake_workers(settings, count, seconds + 4):
            time.sleep(2)  # let every process reach its rhythm
            calls = command_costs(client).get("evalsha", (0, 0.0))[0]
            busy = measure_redis_cpu(client, seconds)
            rate = (command_costs(client)["evalsha"][0] - calls) / seconds / 2
        return idle, busy, rate
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--redis-url", default=None, help="a Redis to measure (default: a redis-server of its own)"
    )
    parser.add_argument("--reads", type=int, default=100)
    parser.add_argument("--interval-s", type=float, default=2.0)
    parser.add_argument("--cpu-seconds", type=float, default=20.0)
    args = parser.parse_args()
    own = None
    if args.redis_url is None:
        own, port = start_redis_server()
        args.redis_url = f"redis://127.0.0.1:{port}/0"
    try:
        _report(args)
    finally:
        if own is not None:
            own.kill()
            own.wait()


def _report(args: argparse.Namespace) -> None:
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    print(
        f"live_workers() on {args.redis_url.split('@')[-1]}, {args.reads} reads each, "
        f"workers heartbeating every {args.interval_s} s"
    )
    print(f"{'workers':>8} {'median ms':>10} {'p95 ms':>8} {'ms/worker':>10} {'tag read ms':>12}")
    for count in SIZES:
        median, p95, found, tagged = bench(args.redis_url, count, args.reads, args.interval_s)
        print(f"{found:>8} {median:>10.3f} {p95:>8.3f} {median / found:>10.5f} {tagged:>12.3f}")
    print(
        f"\nRedis CPU, fake idle workers (heartbeat + reaper tick every {args.interval_s} s), "
        f"no runs, own redis-server, {args.cpu_seconds:g} s each"
    )
    print(f"{'workers':>8} {'idle %':>8} {'with workers %':>15} {'scripts/s':>10} {'load':>6}")
    for count in CPU_SIZES:
        idle, busy, rate = cpu(count, args.cpu_seconds, args.interval_s)
        print(
            f"{count:>8} {idle * 100:>8.2f} {busy * 100:>15.2f} {rate * 2:>10.0f} "
            f"{os.getloadavg()[0]:>6.2f}"
        )


if __name__ == "__main__":
    main()
