"""Soma-style Filter classes that no catalog registers: what a Soma user's
``Graph.save`` bundle names by ``class_path`` (``testkit.soma_filters.Scale``).

Plain classes with Soma's Filter surface (``fit``, ``forward``, ``kwargs``,
``class_version``, ``_kind``), so the tests need no ``soma`` package.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class Scale:
    """Stateless: multiplies every value by ``factor``."""

    _kind = "stateless"
    class_version = 1

    def __init__(self, factor: float = 1.0) -> None:
        self.factor = factor

    def kwargs(self) -> dict[str, Any]:
        return {"factor": self.factor}

    def fit(self, x: Any, y: Any = None) -> None:
        return None

    def forward(self, x: Any, state: Any) -> list[float]:
        return [float(v) * self.factor for v in x]


class Centre:
    """Trainable with a JSON state: learns the mean, forward subtracts it."""

    class_version = 1

    def fit(self, x: Any, y: Any = None) -> dict[str, float]:
        return {"mean": float(np.mean(x))}

    def forward(self, x: Any, state: dict[str, float]) -> list[float]:
        return [float(v) - state["mean"] for v in x]


class Affine:
    """Trainable with tensor state (safetensors in a bundle): ``w * x + b`` per value,
    fitted by least squares; the JSON remainder carries a note."""

    class_version = 2

    def __init__(self, note: str = "") -> None:
        self.note = note

    def fit(self, x: Any, y: Any = None) -> dict[str, Any]:
        xs = np.asarray(x, dtype=np.float64)
        ys = np.asarray(y if y is not None else x, dtype=np.float64)
        w, b = np.polyfit(xs, ys, 1)
        return {"w": np.array([w]), "b": np.array([b]), "note": self.note}

    def forward(self, x: Any, state: dict[str, Any]) -> list[float]:
        w, b = float(state["w"][0]), float(state["b"][0])
        return [round(w * float(v) + b, 9) for v in x]


class Join:
    """Stateless: sums what each predecessor gave, by predecessor id."""

    _kind = "stateless"

    def fit(self, x: Any, y: Any = None) -> None:
        return None

    def forward(self, x: dict[str, list[float]], state: Any) -> dict[str, Any]:
        return {"keys": sorted(x), "total": round(sum(sum(v) for v in x.values()), 9)}
