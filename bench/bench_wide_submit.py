"""``submit_plan`` of a very wide Parallel: its time, the producer's memory, Redis' memory.

Issue 21's bar: a Parallel of 200,000 branches submitted in under 10 s by a producer
under 400 MB (before: 30 s, 1.1 GB, and 185 MB of Redis). The producer runs in a
process of its own (so its peak RSS, ``ru_maxrss``, is its alone), against a
redis-server of the benchmark's own; the live "workers" are heartbeats written
here (``--workers``, 64 slots each), so nothing consumes the messages: what is
measured is the submission. Reported: the seconds ``submit_plan`` took, the
producer's peak RSS before and after building the plan and after submitting,
Redis' ``used_memory`` growth, and where the time went (``--profile``: the top of
a cProfile of the submission).

    python -m bench.bench_wide_submit [--branches 200000] [--workers 4] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import resource
import subprocess
import sys
import threading
import time
from typing import Any

from bench.common import bench_settings
from scheduler import WorkerInfo
from somatize_tasks.config.settings import Settings
from somatize_tasks.runtime.producer.submit import submit_plan
from somatize_tasks.workers.registry import Registry


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def producer(settings_json: str, branches: int, profile: bool) -> dict[str, Any]:
    """In the child process: build the plan, submit it, measure."""
    settings = Settings.model_validate_json(settings_json)
    client = Registry.from_settings(settings).client
    used_before = int(client.info("memory")["used_memory"])
    start_mb = peak_mb()
    plan = {"Parallel": [{"Execute": {"node_id": f"rt_add_{i}"}} for i in range(branches)]}
    plan_mb = peak_mb()
    profiler = cProfile.Profile() if profile else None
    started = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    run = submit_plan(plan, input=1.0, settings=settings, require_workers=True)
    if profiler is not None:
        profiler.disable()
    took = time.perf_counter() - started
    found: dict[str, Any] = {
        "run": run.id,
        "seconds": round(took, 2),
        "peak_mb_at_start": round(start_mb),
        "peak_mb_with_plan": round(plan_mb),
        "peak_mb_after_submit": round(peak_mb()),
        "redis_mb_added": round(
            (int(client.info("memory")["used_memory"]) - used_before) / 2**20, 1
        ),
    }
    if profiler is not None:
        out = io.StringIO()
        order = os.environ.get("WIDE_SORT", "cumulative")  # or tottime
        pstats.Stats(profiler, stream=out).sort_stats(order).print_stats(40)
        found["profile"] = out.getvalue()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--branches", type=int, default=200_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(producer(args.child, args.branches, args.profile)))
        return
    with bench_settings("bench-wide", inline_max_bytes=1024) as (settings, _):
        registry = Registry.from_settings(settings)
        infos = [
            WorkerInfo(id=f"{settings.key_prefix}-w{i}", name=f"w{i}", max_concurrent=64)
            for i in range(args.workers)
        ]
        beating = threading.Event()

        def beat() -> None:  # live "workers" for as long as the producer runs
            while not beating.wait(0.2):
                for info in infos:
                    registry.heartbeat(info)

        for info in infos:
            registry.heartbeat(info)
        threading.Thread(target=beat, daemon=True).start()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.bench_wide_submit",
                "--branches",
                str(args.branches),
                *(["--profile"] if args.profile else []),
                "--child",
                settings.model_dump_json(),
            ],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "PYTHONPATH": os.getcwd()},
        )
        beating.set()
        if done.returncode != 0:
            print(done.stdout, done.stderr)
            raise SystemExit(1)
        found = json.loads(done.stdout.strip().splitlines()[-1])
    profile = found.pop("profile", None)
    print(f"{args.branches} branches on {args.workers} workers (load {os.getloadavg()[0]:.1f}):")
    for key, value in found.items():
        print(f"  {key:22} {value}")
    if profile:
        print(profile)


if __name__ == "__main__":
    main()
