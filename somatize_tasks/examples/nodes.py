"""A small demo catalog matching ``examples/pipeline.plan.json``.

Start a worker with ``--nodes somatize_tasks.examples.nodes``. Everything is
pure Python plus NumPy, fast and deterministic (fixed seeds), and every
value crossing nodes is JSON data, so any two workers can exchange it.

The pipeline: ``load`` makes a two-class data set, ``normalize`` scales it,
``train_svm`` and ``train_knn`` fit two models in parallel, ``evaluate``
picks the better one, ``good_enough`` answers ``"yes"`` or ``"no"``, and the
``"no"`` arm loops ``adjust -> retrain -> check`` until ``check`` says done.
With the defaults the best accuracy is 0.895: ``pipeline.params.json`` sets
both thresholds to 0.95, so the run takes the ``"no"`` arm and tunes for
three passes (0.915, 0.935, 0.955). Every pipeline node takes ``pause_s``
(sleep that long first), which ``somatize-tasks demo`` uses to pace the run.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from somatize_tasks.catalog.entries import node

Dataset = dict[str, Any]


def _pause(pause_s: float) -> None:
    """Sleep ``pause_s`` seconds: the demo paces its nodes so a person can watch the run."""
    if pause_s > 0:
        time.sleep(pause_s)


def _arrays(data: Dataset) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(data["x"], dtype=float), np.asarray(data["y"], dtype=int)


def _accuracy(predicted: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean(predicted == truth)) if truth.size else 0.0


@node
def load(
    _: Any = None, n: int = 200, seed: int = 0, spread: float = 1.0, pause_s: float = 0.0
) -> Dataset:
    """Two Gaussian blobs in 2-D, labelled 0 and 1."""
    _pause(pause_s)
    rng = np.random.default_rng(seed)
    half = n // 2
    x = np.vstack([rng.normal(-1.0, spread, (half, 2)), rng.normal(1.0, spread, (n - half, 2))])
    y = np.array([0] * half + [1] * (n - half))
    return {"x": x.round(6).tolist(), "y": y.tolist()}


@node
def normalize(data: Dataset, pause_s: float = 0.0) -> Dataset:
    """Zero mean, unit variance per feature."""
    _pause(pause_s)
    x, y = _arrays(data)
    std = x.std(axis=0)
    scaled = (x - x.mean(axis=0)) / np.where(std == 0, 1.0, std)
    return {"x": scaled.round(6).tolist(), "y": y.tolist()}


@node
def train_svm(
    data: Dataset, epochs: int = 20, lr: float = 0.1, pause_s: float = 0.0
) -> dict[str, Any]:
    """A linear classifier trained by hinge-loss gradient descent."""
    _pause(pause_s)
    x, y = _arrays(data)
    signs = np.where(y == 1, 1.0, -1.0)
    w, b = np.zeros(x.shape[1]), 0.0
    for _ in range(epochs):
        margin = signs * (x @ w + b)
        active = margin < 1
        w -= lr * (0.01 * w - (signs[active, None] * x[active]).sum(axis=0) / len(x))
        b += lr * signs[active].sum() / len(x)
    accuracy = _accuracy((x @ w + b > 0).astype(int), y)
    return {"kind": "svm", "w": w.round(6).tolist(), "b": round(b, 6), "accuracy": accuracy}


@node
def train_knn(data: Dataset, k: int = 5, pause_s: float = 0.0) -> dict[str, Any]:
    """k nearest neighbours, scored by leave-one-out accuracy."""
    _pause(pause_s)
    x, y = _arrays(data)
    distances = ((x[:, None, :] - x[None, :, :]) ** 2).sum(axis=2)
    np.fill_diagonal(distances, np.inf)
    nearest = np.argsort(distances, axis=1)[:, :k]
    predicted = (y[nearest].mean(axis=1) > 0.5).astype(int)
    return {"kind": "knn", "k": k, "accuracy": _accuracy(predicted, y)}


@node
def evaluate(models: dict[str, Any], pause_s: float = 0.0) -> dict[str, Any]:
    """The best of the trained models (the Parallel's {node id: output} mapping)."""
    _pause(pause_s)
    scores = {name: float(model["accuracy"]) for name, model in models.items()}
    best = max(sorted(scores), key=lambda name: scores[name])
    return {"best": best, "accuracy": scores[best], "scores": scores}


@node
def good_enough(report: dict[str, Any], threshold: float = 0.9, pause_s: float = 0.0) -> str:
    """Branch label: ``"yes"`` if the best accuracy reaches ``threshold``."""
    _pause(pause_s)
    return "yes" if report["accuracy"] >= threshold else "no"


@node
def export(report: dict[str, Any], pause_s: float = 0.0) -> dict[str, Any]:
    """What would be shipped: the chosen model and its score."""
    _pause(pause_s)
    return {"exported": report["best"], "accuracy": report["accuracy"]}


@node
def adjust(report: dict[str, Any], step: float = 0.02, pause_s: float = 0.0) -> dict[str, Any]:
    """One tuning step: raise the learning budget of the current best."""
    _pause(pause_s)
    return {**report, "budget": int(report.get("budget", 0)) + 1, "step": step}


@node
def retrain(report: dict[str, Any], pause_s: float = 0.0) -> dict[str, Any]:
    """Pretend retraining: each budget unit adds ``step`` accuracy, capped at 1."""
    _pause(pause_s)
    accuracy = min(1.0, round(float(report["accuracy"]) + float(report["step"]), 6))
    return {**report, "accuracy": accuracy}


@node
def check(report: dict[str, Any], threshold: float = 0.9, pause_s: float = 0.0) -> dict[str, bool]:
    """Loop signal: done once the accuracy reaches ``threshold``."""
    _pause(pause_s)
    return {"done": float(report["accuracy"]) >= threshold}


@node
def double(value: Any) -> Any:
    """Twice the input (numbers, or element-wise for lists)."""
    return [2 * item for item in value] if isinstance(value, list) else 2 * value


@node
def add_one(value: Any) -> Any:
    """The input plus one (numbers, or element-wise for lists)."""
    return [item + 1 for item in value] if isinstance(value, list) else value + 1


@node
def total(value: Any) -> Any:
    """The sum of a list, or of a mapping's values (a Parallel's output)."""
    items = value.values() if isinstance(value, dict) else value
    return sum(items)


@node("scale")
class Scale:
    """A Soma-style Filter: ``fit`` learns the maximum, ``forward`` divides by it."""

    def __init__(self, target: float = 1.0) -> None:
        self.target = target

    def fit(self, x: Any, y: Any = None) -> float:
        return float(np.max(np.abs(np.asarray(x, dtype=float)))) or 1.0

    def forward(self, x: Any, state: float) -> Any:
        return (np.asarray(x, dtype=float) * (self.target / state)).tolist()
