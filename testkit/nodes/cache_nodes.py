"""Nodes for the content-cache and study tests: each execution leaves a line in a log.

A node's ``log`` parameter names a directory; every call appends one line to
``<log>/<tag>``, so a test counts how often each node's code really ran (a
cache hit runs none). Being parameters, ``log`` and ``tag`` are part of the
node's cache key too, which keeps one test's entries apart from another's.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from somatize_tasks import node


def ran(log: str, tag: str) -> None:
    path = Path(log)
    path.mkdir(parents=True, exist_ok=True)
    with (path / tag).open("a") as fh:
        fh.write("ran\n")


def runs(log: str | Path, tag: str) -> int:
    """How many times the node tagged ``tag`` ran."""
    path = Path(log) / tag
    return len(path.read_text().splitlines()) if path.exists() else 0


@node("ck_add")
def add(x: Any, log: str, tag: str, k: float = 1.0) -> float:
    ran(log, tag)
    return float(x or 0) + k


@node("ck_clip")
def clip(x: Any, log: str, tag: str, high: float = 100.0) -> float:
    """``min(x, high)``: a change of ``high`` above ``x`` changes nothing downstream."""
    ran(log, tag)
    return min(float(x or 0), high)


@node("ck_sum")
def total(parts: Any, log: str, tag: str) -> float:
    ran(log, tag)
    values = parts.values() if isinstance(parts, dict) else parts
    return float(sum(values))


@node("ck_big")
def big(x: Any, log: str, tag: str, n: int = 2000) -> list[float]:
    """A value too large to ride inline: it lives in the shared store."""
    ran(log, tag)
    return [float(x or 0) + i for i in range(n)]


@node("ck_len")
def length(values: list[float], log: str, tag: str) -> float:
    ran(log, tag)
    return float(sum(values))


@node("ck_flaky")
def flaky(x: Any, log: str, tag: str, marker: str) -> Any:
    """Fails the first time it runs (it leaves ``marker`` behind), then passes ``x`` on."""
    ran(log, tag)
    first = Path(marker)
    if not first.exists():
        first.parent.mkdir(parents=True, exist_ok=True)
        first.write_text("failed once")
        raise RuntimeError("ck_flaky fails on its first try")
    return x


@node("ck_noisy", deterministic=False)
def noisy(x: Any, log: str, tag: str) -> float:
    """Declared non-deterministic: its forward is never served from the cache."""
    ran(log, tag)
    return float(x or 0) + random.random()


@node("ck_scale")
class Scale:
    """A trainable filter: learns the mean of its input, divides by it."""

    def __init__(self, log: str, tag: str) -> None:
        self.log, self.tag = log, tag

    def fit(self, x: Any, y: Any = None) -> float:
        ran(self.log, f"{self.tag}.fit")
        return float(sum(x)) / len(x)

    def forward(self, x: Any, state: float) -> list[float]:
        ran(self.log, self.tag)
        return [v / state for v in x]
