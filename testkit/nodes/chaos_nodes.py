"""Nodes for chaos_kill_worker: sleeping nodes with known outputs (lists, so they
are too big to travel inline and a killed worker's cache really loses them)."""

from __future__ import annotations

import time
from typing import Any

from somatize_tasks import node


@node("ch_inc")
def inc(value: Any, s: float = 0.3) -> list[int]:
    time.sleep(s)
    base = value if isinstance(value, list) else [0] * 64
    return [v + 1 for v in base]


@node("ch_join")
def join(parts: dict[str, list[int]]) -> list[int]:
    return [sum(column) for column in zip(*parts.values(), strict=True)]
