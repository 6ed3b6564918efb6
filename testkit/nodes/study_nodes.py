"""Nodes for the study tests: an objective with a known minimum, a learning curve.

``st_quad`` is ``(a - 1.3)² + (b + 0.7)² + 2``: its minimum, 2.0, is at
``a = 1.3, b = -0.7``. ``st_curve`` reports a loss at every step and stops
when its trial is pruned. Both append one line per execution to ``log``
(when given), so a test counts how many times trials really ran.
"""

from __future__ import annotations

import time
from typing import Any

from somatize_tasks import current_seed, current_trial, node, report
from testkit.nodes.cache_nodes import ran

QUAD_MINIMUM = 2.0


@node("st_quad")
def quad(_: Any, a: float = 0.0, b: float = 0.0, log: str = "", pause: float = 0.2) -> float:
    if log:
        ran(log, "quad")
    time.sleep(pause)  # long enough for trials on several workers to overlap
    return (a - 1.3) ** 2 + (b + 0.7) ** 2 + QUAD_MINIMUM


@node("st_curve")
def curve(
    _: Any, rate: float = 1.0, steps: int = 8, pause: float = 0.05, log: str = ""
) -> dict[str, Any]:
    """A loss falling as ``1 / (1 + rate * step)``: a small rate is worse at every step."""
    if log:
        ran(log, "curve")
    loss = 1.0
    for step in range(steps):
        time.sleep(pause)
        loss = 1.0 / (1.0 + rate * (step + 1))
        if report("loss", loss, step):
            return {"loss": loss, "stopped_at": step, "trial": current_trial()}
    return {"loss": loss, "stopped_at": None, "trial": current_trial(), "seed": current_seed()}
