"""Catalog nodes for the Soma-fidelity tests (imported by the test workers too).

``sm_standardise`` and ``sm_centroids`` are a scikit-learn-style pipeline
written in NumPy: a standardiser that learns each column's mean and scale,
and a nearest-centroid classifier that learns one centroid per label.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from somatize_tasks import Handoff, node


@node("sm_standardise")
class Standardise:
    """Learns column means and standard deviations; forward centres and scales."""

    def fit(self, x: Any, y: Any = None) -> dict[str, list[float]]:
        data = np.asarray(x, dtype=float)
        scale = data.std(axis=0)
        return {"mean": data.mean(axis=0).tolist(), "scale": np.where(scale, scale, 1).tolist()}

    def forward(self, x: Any, state: dict[str, list[float]]) -> np.ndarray:
        return (np.asarray(x, dtype=float) - state["mean"]) / np.asarray(state["scale"])


@node("sm_centroids")
class NearestCentroid:
    """Learns one centroid per label; forward predicts the nearest centroid's label."""

    def fit(self, x: Any, y: Any = None) -> dict[str, Any]:
        data, labels = np.asarray(x, dtype=float), np.asarray(y)
        classes = sorted(set(labels.tolist()))
        return {
            "classes": classes,
            "centroids": [data[labels == c].mean(axis=0).tolist() for c in classes],
        }

    def forward(self, x: Any, state: dict[str, Any]) -> list[Any]:
        data, centroids = np.asarray(x, dtype=float), np.asarray(state["centroids"])
        distances = ((data[:, None, :] - centroids[None, :, :]) ** 2).sum(axis=2)
        return [state["classes"][i] for i in distances.argmin(axis=1)]


@node("sm_offset")
class Offset:
    """Trainable: learns the mean of its input; forward adds it (a visible state)."""

    def fit(self, x: Any, y: Any = None) -> float:
        return float(np.mean(x))

    def forward(self, x: Any, state: float) -> Any:
        return (np.asarray(x, dtype=float) + state).tolist()


@node("sm_stateless")
class Stateless:
    _kind = "stateless"

    def fit(self, x: Any, y: Any = None) -> None:
        raise AssertionError("a stateless filter is never fitted")

    def forward(self, x: Any, state: Any) -> Any:
        return {"state": state, "x": x}


@node("sm_fixed", stream="fixed_state")
class AddState:
    """Adds its state (fixed: the same for every chunk)."""

    def fit(self, x: Any, y: Any = None) -> float:
        return 100.0

    def forward(self, x: Any, state: float) -> list[float]:
        return [v + (state or 0.0) for v in x]


@node("sm_evolving", stream="evolving")
class RunningTotal:
    """Evolving: each chunk's output is the next chunk's state (a running sum)."""

    _kind = "stateless"

    def fit(self, x: Any, y: Any = None) -> None:
        return None

    def forward(self, x: Any, state: Any) -> list[float]:
        carried = state[-1] if state else 0.0
        out, total = [], carried
        for v in x:
            total += v
            out.append(total)
        return out


@node("sm_evolving_trained", stream="evolving")
class TrainedRunningTotal(RunningTotal):
    """Trainable (it learns a starting total), evolving: never fitted, it starts from None."""

    _kind = "trainable"

    def fit(self, x: Any, y: Any = None) -> list[float]:  # type: ignore[override]
        return [float(sum(x))]


@node("sm_barrier", stream="barrier")
def normalise_all(x: Any) -> list[float]:
    """A barrier: sees the whole stream at once."""
    values = np.asarray(x, dtype=float)
    return (values / values.sum()).tolist()


@node("sm_count_chunk")
def count_chunk(x: Any) -> Any:
    """One chunk's length, as a one-element list (so stream outputs concatenate)."""
    return [len(x)] if isinstance(x, list | np.ndarray) else {"whole": x}


@node("sm_describe")
def describe(x: Any) -> str:
    return f"{type(x).__name__}:{x}"


@node("sm_inc")
def inc(x: Any) -> float:
    return float(x or 0) + 1


@node("sm_times10")
def times10(x: Any) -> float:
    return float(x) * 10


@node("sm_pair")
def pair(x: Any) -> Any:
    """What a multi-predecessor node sees: a dict keyed by predecessor id."""
    return {"keys": sorted(x), "sum": sum(float(v) for v in x.values())}


@node("sm_never_stop")
def never_stop(_: Any) -> str:
    return "continue"


@node("sm_bool")
def as_bool(x: Any) -> bool:
    return float(x) > 0


@node("sm_select")
def select(x: Any) -> dict[str, str]:
    return {"branch": "neg" if float(x) < 0 else "pos"}


@node("sm_unknown_label")
def unknown_label(_: Any) -> str:
    return "nothing-matches"


@node("sm_hand_to")
def hand_to(x: Any) -> Handoff:
    return Handoff("tens", x)


@node("sm_signal_first")
def signal_first(x: Any) -> bool:
    """Stops as soon as the value reaches 3."""
    return float(x) >= 3
