"""Time ``live_workers()`` with 1, 100 and 1,000 heartbeating workers.

Simulated workers heartbeat from a background thread at their real rate
(each worker once per ``--interval-s``, spread evenly), so the reads below
compete with writes as they would in a cluster. Each read is one Lua
script call: one Redis round trip whatever the number of workers. The
median and 95th percentile of ``--reads`` calls are printed per size.

    python bench/bench_registry.py [--redis-url URL] [--reads 300]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid

from redis import Redis

from scheduler import WorkerInfo
from somatize_tasks import live_workers
from somatize_tasks.keys import RedisKeys
from somatize_tasks.registry import Registry
from somatize_tasks.settings import Settings

SIZES = (1, 100, 1_000)


def simulate(registry: Registry, count: int, interval_s: float, stop: threading.Event) -> int:
    """Heartbeat ``count`` workers, each once per interval, until ``stop``; returns writes."""
    infos = [
        WorkerInfo(
            id=f"sim-{index:04d}",
            name=f"sim-{index:04d}@bench",
            tags=["gpu"] if index % 4 == 0 else ["cpu"],
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


def bench(redis_url: str, count: int, reads: int, interval_s: float) -> tuple[float, float, int]:
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
    finally:
        stop.set()
        thread.join()
        client: Redis[bytes] = reader.client
        client.delete(RedisKeys(prefix).workers_seen, RedisKeys(prefix).workers_info)
    timings.sort()
    return statistics.median(timings), timings[int(len(timings) * 0.95) - 1], len(workers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--reads", type=int, default=300)
    parser.add_argument("--interval-s", type=float, default=2.0)
    args = parser.parse_args()
    print(
        f"live_workers() on {args.redis_url.split('@')[-1]}, {args.reads} reads each, "
        f"workers heartbeating every {args.interval_s} s"
    )
    print(f"{'workers':>8} {'median ms':>10} {'p95 ms':>8} {'ms/worker':>10}")
    for count in SIZES:
        median, p95, found = bench(args.redis_url, count, args.reads, args.interval_s)
        print(f"{found:>8} {median:>10.3f} {p95:>8.3f} {median / found:>10.5f}")


if __name__ == "__main__":
    main()
