"""Nodes for the fault matrix (``testkit.faults.matrix``): sleeping nodes with known outputs,
big values that must travel through S3, a node that kills its own worker, and
the "trip" that SIGKILLs a worker just after one of its completions is recorded.

The trip is armed only in workers started with ``BENCH_FAULTS_TRIP_DIR`` set:
it wraps the run state's two record calls, and the first time a block holding
a ``fm_trip`` node is recorded in a run, it kills its own worker at once (the
issue's "worker SIGKILLed within ~1 ms after a completion is recorded").
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np

from somatize_tasks import node
from somatize_tasks.runtime.state.redis_state import RedisRunState

TRIP_ENV = "BENCH_FAULTS_TRIP_DIR"


@node("fm_inc")
def inc(value: Any, s: float = 0.2) -> list[int]:
    """Too big to travel inline (the cluster's inline limit is 128 bytes)."""
    time.sleep(s)
    base = value if isinstance(value, list) else [0] * 64
    return [v + 1 for v in base]


@node("fm_trip")
def trip(value: Any, s: float = 0.2) -> list[int]:
    """An ``fm_inc`` whose recorded completion kills its worker (see the module doc)."""
    return inc(value, s)


@node("fm_join")
def join(parts: dict[str, list[int]]) -> list[int]:
    return [sum(column) for column in zip(*parts.values(), strict=True)]


@node("fm_leaf")
def leaf(value: Any, i: int = 0) -> int:
    """One branch of a wide Parallel: a small, known output."""
    return i


@node("fm_big")
def big(value: Any, mb: int = 24) -> bytes:
    """A value large enough to go multipart through S3 and take a while to move."""
    return bytes(range(256)) * (mb * 4096)


@node("fm_digest")
def digest(value: Any) -> str:
    data = value if isinstance(value, bytes) else repr(value).encode()
    return hashlib.sha256(data).hexdigest()[:16]


@node("fm_echo")
def echo(value: Any) -> Any:
    """Returns its input: a forged input shows in the run's output."""
    return value


@node("fm_rand")
def rand(value: Any, s: float = 0.2, n: int = 64) -> list[float]:
    """Different on every execution (random numbers, as a training node's weights): a
    stale execution's value read anywhere shows."""
    time.sleep(s)
    return [random.random() for _ in range(n)]


@node("fm_array")
def array(value: Any, mb: float = 3.0) -> np.ndarray:
    """``mb`` MiB of floats: NumPy writes it with ``tofile``, whose short write on a
    full disk carries no errno."""
    return np.random.default_rng().standard_normal(int(mb * (1 << 20)) // 8)


@node("fm_count")
def count(value: Any) -> int:
    """The carry of a long loop: one more each pass."""
    return (value if isinstance(value, int) else 0) + 1


@node("fm_poison")
def poison(value: Any) -> Any:
    """Kills its own worker (the whole process group) every time it runs."""
    os.killpg(os.getpgrp(), signal.SIGKILL)
    return value  # pragma: no cover - never reached


def _arm_trip(directory: Path) -> None:
    """Wrap the record calls (a worker-side fault injector, never in production)."""

    def tripped(state: RedisRunState, nodes: list[str]) -> None:
        if not any(n.startswith("fm_trip") for n in nodes):
            return
        try:
            fd = os.open(directory / state.run_id, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return  # once per run: its recomputation must be able to finish
        os.close(fd)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    record_leaf = RedisRunState.record_leaf
    record_and_join = RedisRunState.record_and_join

    def record_leaf_then_trip(self: RedisRunState, *args: Any, **kwargs: Any) -> Any:
        recorded = record_leaf(self, *args, **kwargs)
        if recorded:
            tripped(self, list(args[2]))
        return recorded

    def record_and_join_then_trip(self: RedisRunState, *args: Any, **kwargs: Any) -> Any:
        found = record_and_join(self, *args, **kwargs)
        if found[0]:
            tripped(self, list(args[2]))
        return found

    RedisRunState.record_leaf = record_leaf_then_trip  # type: ignore[method-assign]
    RedisRunState.record_and_join = record_and_join_then_trip  # type: ignore[method-assign]


if os.environ.get(TRIP_ENV):
    _arm_trip(Path(os.environ[TRIP_ENV]))
