"""The work bench_peers runs on every peer: no-ops and a large value, same functions."""

from __future__ import annotations

from typing import Any

import numpy as np

from somatize_tasks import node


@node("peer_noop")
def noop(value: Any = None) -> Any:
    """Returns a small constant: the value never matters, only the step."""
    return 1


@node("peer_collect")
def collect(values: Any) -> int:
    return len(values) if isinstance(values, dict | list) else 1


@node("peer_make")
def make(_: Any = None, n_bytes: int = 16 << 20) -> np.ndarray:
    return np.ones(n_bytes, dtype=np.uint8)


@node("peer_size")
def size(value: Any) -> int:
    return int(np.asarray(value).nbytes)
