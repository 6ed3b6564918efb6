"""Nodes whose value differs on every execution, so a stale copy is visible.

``fence_draw`` sleeps (long enough for a test to pause its worker mid-node), then
returns fresh random numbers and a fresh token: two executions of it never agree.
``fence_use`` hands its input on unchanged, so the run's output is exactly what the
consumer read. Fencing tests compare that with the node's value read back after the
run: the recorded execution's, whichever execution finished first.
"""

from __future__ import annotations

import random
import time
import uuid
from typing import Any

from somatize_tasks import node


@node("fence_draw")
def draw(value: Any, s: float = 2.0, n: int = 4) -> dict[str, Any]:
    """``n`` random numbers: 4 ride inline; a few hundred go through the store."""
    time.sleep(s)
    return {"token": uuid.uuid4().hex, "numbers": [random.random() for _ in range(n)]}


@node("fence_use")
def use(value: Any) -> Any:
    return value
