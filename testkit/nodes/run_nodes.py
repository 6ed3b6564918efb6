"""Catalog for the runtime tests: small, deterministic nodes with checkable outputs.

Loaded into the test workers (``--nodes``) and used in-process by the local
runner tests.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import numpy as np

from somatize_tasks import node
from somatize_tasks.runtime.compile.control import Handoff


@node("rt_make")
def make(_: Any = None, n: int = 400, start: float = 0.0) -> list[float]:
    """A list long enough (several KB as JSON) to travel through the store, not inline."""
    return [start + i * 0.5 for i in range(n)]


@node("rt_sum")
def total(values: list[float]) -> float:
    return float(sum(values))


@node("rt_scale")
def scale(values: list[float], factor: float = 2.0) -> list[float]:
    return [v * factor for v in values]


@node("rt_add")
def add(value: float, k: float = 1.0) -> float:
    return value + k


@node("rt_join")
def join(parts: dict[str, Any]) -> dict[str, Any]:
    """Sums each branch's output; keeps the keys so tests see which branches came in."""
    return {"keys": sorted(parts), "total": float(sum(_as_number(v) for v in parts.values()))}


def _as_number(value: Any) -> float:
    return float(sum(value)) if isinstance(value, list) else float(value)


@node("rt_fail")
def fail(_: Any) -> None:
    raise ValueError("rt_fail failed on purpose")


@node("rt_sleep")
def sleep(value: Any, s: float = 0.5) -> Any:
    time.sleep(s)
    return value


@node("rt_where")
def where(value: Any) -> dict[str, Any]:
    """Which worker process ran this (the worker CLI exports its id)."""
    return {"worker": os.environ.get("SOMATIZE_WORKER_ID"), "value": value}


@node("rt_label")
def label(value: float) -> str:
    return "big" if value > 10 else "small"


@node("rt_done")
def done(value: float) -> bool:
    return value >= 5


@node("rt_bad_signal")
def bad_signal(_: Any) -> int:
    return 42


@node("rt_route")
def route(value: float) -> Handoff:
    return Handoff("double" if value > 0 else "negate", value)


@node("rt_route_nowhere")
def route_nowhere(value: float) -> Handoff:
    return Handoff("nowhere", value)


@node("rt_double")
def double(value: float) -> float:
    return value * 2


@node("rt_negate")
def negate(value: float) -> float:
    return -value


@node("rt_chunk_sum")
def chunk_sum(chunk: list[float]) -> list[float]:
    """Per chunk: each item plus the chunk's length, so chunking is visible."""
    return [v + len(chunk) for v in chunk]


@node("rt_mean_centre")
class MeanCentre:
    """A Soma-style Filter: ``fit`` learns the mean, ``forward`` subtracts it."""

    def fit(self, x: list[float], y: Any = None) -> float:
        return sum(x) / len(x)

    def forward(self, x: list[float], state: float) -> list[float]:
        return [v - state for v in x]


@node("rt_unencodable")
def unencodable(_: Any) -> object:
    """An output no codec can encode."""
    return object()


@node("rt_array")
def array(_: Any = None, mb: float = 4.0) -> np.ndarray:
    """``mb`` MiB of random floats: a NumPy value (written with ``tofile``), different
    on every execution."""
    return np.random.default_rng().standard_normal(int(mb * (1 << 20)) // 8)


@node("rt_size")
def size(values: list[float]) -> int:
    return len(values)


@node("rt_suicide")
def suicide(_: Any) -> None:
    """Kills the process running it: a pool child under prefork, the worker under solo."""
    os.kill(os.getpid(), signal.SIGKILL)
