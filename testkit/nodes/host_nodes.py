"""Nodes for the multi-host tests: values of a known size and digest, and probes of
what a worker's host can see (its ``/dev/shm``, paths of another host)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from somatize_tasks import node


def make_array(mb: int, seed: int) -> np.ndarray:
    """``mb`` MiB of seeded random bytes: what ``mh_array`` returns, rebuilt by a test."""
    return np.random.default_rng(seed).integers(0, 256, size=mb << 20, dtype=np.uint8)


def make_blob(kb: int, seed: int) -> bytes:
    return hashlib.shake_256(f"blob-{seed}".encode()).digest(kb << 10)


def _worker() -> str | None:
    return os.environ.get("SOMATIZE_WORKER_ID")


@node("mh_array")
def array(_: Any = None, mb: int = 12, seed: int = 0) -> np.ndarray:
    return make_array(mb, seed)


@node("mh_blob")
def blob(_: Any = None, kb: int = 64, seed: int = 0) -> bytes:
    """A medium value (bytes): through the store, below the multipart threshold."""
    return make_blob(kb, seed)


@node("mh_digest")
def digest(value: Any) -> dict[str, Any]:
    """What reached this worker, exactly: its bytes' sha256, size and type."""
    if isinstance(value, np.ndarray):
        data, kind = value.tobytes(), f"ndarray:{value.dtype}:{list(value.shape)}"
    elif isinstance(value, bytes):
        data, kind = value, "bytes"
    else:
        data, kind = repr(value).encode(), type(value).__name__
    return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "kind": kind}


@node("mh_where")
def where(value: Any) -> dict[str, Any]:
    """The worker that ran this and the value it got (small values only)."""
    return {"worker": _worker(), "value": value}


@node("mh_mark")
def mark(_: Any = None, name: str = "mark") -> dict[str, Any]:
    """Write ``/dev/shm/<name>`` on this worker's host."""
    path = Path("/dev/shm") / name
    path.write_text(str(_worker()))
    return {"worker": _worker(), "path": str(path)}


@node("mh_look")
def look(_: Any = None, paths: list[str] | None = None) -> dict[str, Any]:
    """Which of ``paths`` exist on this worker's host (and which worker looked)."""
    return {"worker": _worker(), "exists": {p: os.path.exists(p) for p in paths or []}}
