"""Fake workers, many per process, that cost Redis what real idle workers cost.

A real idle worker does two things against Redis each heartbeat interval:
its heartbeat (:meth:`Registry.heartbeat`) and its reaper thread's tick
(:meth:`ReaperLoop.tick`: take or renew the cluster's reaper lease). A fake
worker does exactly those two calls, with the real code, spread evenly over
the interval; ``processes`` share the fakes so the client side keeps up.
:func:`redis_cpu` measures what Redis spent meanwhile (``INFO cpu``).
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from redis import Redis

from scheduler import WorkerInfo
from somatize_tasks.celery_app import create_app
from somatize_tasks.registry import Registry
from somatize_tasks.runtime.context import run_context
from somatize_tasks.runtime.elected import ReaperLoop
from somatize_tasks.runtime.reaper import Reaper
from somatize_tasks.settings import Settings


def fake_info(index: int) -> WorkerInfo:
    return WorkerInfo(
        id=f"fake-{index:05d}", name=f"fake-{index:05d}@bench",
        tags=["gpu"] if index % 10 == 0 else ["cpu"], gpu=index % 10 == 0,
        cpu_cores=8, active_jobs=4, max_concurrent=4,  # full: never given real work
    )  # fmt: skip


def _run_fakes(settings_json: str, indexes: list[int], stop_at: float) -> None:
    settings = Settings.model_validate_json(settings_json)
    context = run_context(create_app(settings), settings, "fakes")
    registry = Registry.from_settings(settings, context.redis)
    reaper = Reaper(context)
    workers = [(fake_info(i), ReaperLoop(context, reaper, None)) for i in indexes]
    interval = settings.heartbeat_interval_s
    gap = interval / max(1, len(workers))
    next_at = time.monotonic()
    while time.monotonic() < stop_at:
        for info, loop in workers:
            registry.heartbeat(info)
            loop.tick()
            next_at += gap
            pause = next_at - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            if time.monotonic() >= stop_at:
                break
    for _, loop in workers:
        loop.release()


@contextmanager
def fake_workers(settings: Settings, count: int, seconds: float,
                 processes: int = 4) -> Iterator[None]:
    """Run ``count`` fakes for ``seconds`` in ``processes`` processes (joined on exit)."""
    stop_at = time.monotonic() + seconds
    registry = Registry.from_settings(settings)
    for index in range(count):  # everyone registered before measuring starts
        registry.heartbeat(fake_info(index))
    shares = [list(range(p, count, processes)) for p in range(processes)]
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_run_fakes, args=(settings.model_dump_json(), share, stop_at))
             for share in shares if share]
    for proc in procs:
        proc.start()
    try:
        yield
    finally:
        for proc in procs:
            proc.join(timeout=seconds + 30)
            if proc.is_alive():
                proc.kill()
                proc.join()


def redis_cpu_s(client: Redis[bytes]) -> float:
    """Seconds of CPU the Redis server has used (user + system, all its threads)."""
    info: dict[str, Any] = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def measure_redis_cpu(client: Redis[bytes], seconds: float) -> float:
    """Redis CPU over the next ``seconds``, as a fraction of one core."""
    start_cpu, start = redis_cpu_s(client), time.monotonic()
    time.sleep(seconds)
    return (redis_cpu_s(client) - start_cpu) / (time.monotonic() - start)


def command_costs(client: Redis[bytes]) -> dict[str, tuple[int, float]]:
    """``INFO commandstats`` as ``{command: (calls, usec per call)}``."""
    stats: dict[str, Any] = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): (int(v["calls"]), float(v["usec_per_call"]))
            for name, v in stats.items()}
