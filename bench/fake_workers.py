"""Fake workers, many per process, that cost Redis what real idle workers cost.

A real idle worker does two things against Redis each heartbeat interval:
its heartbeat (:meth:`Registry.heartbeat`) and its reaper thread's tick
(:meth:`ReaperLoop.tick`: take or renew the cluster's reaper lease). A fake
worker does exactly those two calls, with the real code, spread evenly over
the interval; ``processes`` share the fakes so the client side keeps up.
:func:`redis_cpu` measures what Redis spent meanwhile (``INFO cpu``).

:meth:`FakeWorkers.pause` turns their calls away from the measured Redis:
with a ``decoy`` (another Redis) they go on, the same calls at the same
rate, against the decoy, so this machine's cores stay exactly as busy
(their Python, a Redis serving them) and only the measured Redis' load
changes; without one they stop. What they really sent is counted
(:attr:`FakeWorkers.beats`), so a check compares with the cluster that ran.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from redis import Redis

from scheduler import WorkerInfo
from somatize_tasks.config.settings import Settings
from somatize_tasks.messaging.celery_app import create_app
from somatize_tasks.runtime.engine.context import run_context
from somatize_tasks.runtime.recovery.elected import ReaperLoop
from somatize_tasks.runtime.recovery.reaper import Reaper
from somatize_tasks.workers.registry import Registry


def fake_info(index: int) -> WorkerInfo:
    return WorkerInfo(
        id=f"fake-{index:05d}",
        name=f"fake-{index:05d}@bench",
        tags=["gpu"] if index % 10 == 0 else ["cpu"],
        gpu=index % 10 == 0,
        cpu_cores=8,
        active_jobs=4,
        max_concurrent=4,  # full: never given real work
    )


def _target(settings: Settings, indexes: list[int]) -> tuple[Registry, list[ReaperLoop]]:
    """A Redis to heartbeat against: its registry and one reaper loop per fake."""
    context = run_context(create_app(settings), settings, "fakes")
    reaper = Reaper(context)
    loops = [ReaperLoop(context, reaper, None) for _ in indexes]
    return Registry.from_settings(settings, context.redis), loops


def _run_fakes(
    settings_json: str,
    decoy_json: str | None,
    indexes: list[int],
    stop_at: float,
    shared: tuple[Any, Any, Any],
) -> None:
    beats, stop, paused = shared
    settings = Settings.model_validate_json(settings_json)
    targets = [
        _target(Settings.model_validate_json(j), indexes)
        for j in (settings_json, decoy_json)
        if j is not None
    ]
    infos = [fake_info(i) for i in indexes]
    gap = settings.heartbeat_interval_s / max(1, len(infos))
    next_at = time.monotonic()
    while time.monotonic() < stop_at and not stop.is_set():
        for number, info in enumerate(infos):
            while paused.is_set() and len(targets) == 1 and not stop.is_set():
                time.sleep(0.01)
                next_at = time.monotonic()
            registry, loops = targets[-1] if paused.is_set() else targets[0]
            registry.heartbeat(info)
            loops[number].tick()
            with beats.get_lock():
                beats.value += 1
            next_at += gap
            pause = next_at - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            if time.monotonic() >= stop_at or stop.is_set():
                break
    for _, loops in targets:
        for loop in loops:
            loop.release()


class FakeWorkers:
    """What the fakes did (:attr:`beats`: heartbeat+tick pairs so far, all processes);
    :meth:`pause` turns them to the decoy, or stops them, until :meth:`resume`."""

    def __init__(self, beats: Any, paused: Any) -> None:
        self._beats, self._paused = beats, paused

    @property
    def beats(self) -> int:
        return int(self._beats.value)

    def pause(self) -> None:
        self._paused.set()

    def resume(self) -> None:
        self._paused.clear()


@contextmanager
def fake_workers(
    settings: Settings,
    count: int,
    seconds: float,
    processes: int = 4,
    decoy: Settings | None = None,
) -> Iterator[FakeWorkers]:
    """Run ``count`` fakes for ``seconds`` in ``processes`` processes (joined on exit);
    paused, they heartbeat against ``decoy`` instead (see the module docstring)."""
    stop_at = time.monotonic() + seconds
    for target in filter(None, (settings, decoy)):
        registry = Registry.from_settings(target)
        for index in range(count):  # everyone registered before measuring starts
            registry.heartbeat(fake_info(index))
    shares = [list(range(p, count, processes)) for p in range(processes)]
    ctx = multiprocessing.get_context("fork")
    shared = (ctx.Value("q", 0), ctx.Event(), ctx.Event())
    decoy_json = decoy.model_dump_json() if decoy else None
    procs = [
        ctx.Process(
            target=_run_fakes, args=(settings.model_dump_json(), decoy_json, share, stop_at, shared)
        )
        for share in shares
        if share
    ]
    for proc in procs:
        proc.start()
    try:
        yield FakeWorkers(shared[0], shared[2])
    finally:
        shared[1].set()  # done early: no need to wait out ``seconds``
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
    return {
        name.removeprefix("cmdstat_"): (int(v["calls"]), float(v["usec_per_call"]))
        for name, v in stats.items()
    }
