"""A study's search space, in Soma's form, and how a sampled point becomes run parameters.

A space is a list of dimensions, each named ``"<node id>.<parameter>"`` (as
Soma names a graph's dimensions)::

    [{"type": "float", "name": "train.lr", "low": 0.0001, "high": 0.1, "scale": "log"},
     {"type": "int", "name": "train.depth", "low": 2, "high": 8},
     {"type": "categorical", "name": "train.kernel", "choices": ["rbf", "linear"]}]

``scale`` is ``"linear"`` (default) or ``"log"``; an ``int`` may have a
``step``. A sampled point ``{"train.lr": 0.01, ...}`` becomes the run's
``params``: ``{"train": {"lr": 0.01, ...}}``, over the study's fixed ones.
Every mistake is a :class:`StudyError` naming the dimension and its field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from somatize_tasks.errors import StudyError

Scalar = bool | int | float | str | None


class Dimension(BaseModel):
    """One dimension of a search space."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["float", "int", "categorical"]
    name: str = Field(pattern=r"^[^.]+\.[^.]+$")
    low: float | None = None
    high: float | None = None
    scale: Literal["linear", "log"] = "linear"
    step: float | None = Field(default=None, gt=0)
    choices: list[Scalar] | None = None

    @model_validator(mode="after")
    def _fits_its_type(self) -> Dimension:
        if self.type == "categorical":
            if not self.choices:
                raise ValueError("a categorical dimension needs a non-empty 'choices'")
            return self
        if self.low is None or self.high is None:
            raise ValueError(f"a {self.type} dimension needs 'low' and 'high'")
        if not (math.isfinite(self.low) and math.isfinite(self.high)) or self.low > self.high:
            raise ValueError(f"'low' ({self.low}) must be finite and at most 'high' ({self.high})")
        if self.scale == "log" and self.low <= 0:
            raise ValueError(f"a log scale needs 'low' > 0, not {self.low}")
        if self.type == "int" and (self.low != int(self.low) or self.high != int(self.high)):
            raise ValueError("an int dimension needs whole 'low' and 'high'")
        return self

    @property
    def node(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def param(self) -> str:
        return self.name.split(".", 1)[1]

    def distribution(self) -> BaseDistribution:
        """The Optuna distribution this dimension samples from."""
        log = self.scale == "log"
        if self.type == "categorical":
            return CategoricalDistribution(list(self.choices or []))
        assert self.low is not None and self.high is not None
        if self.type == "int":
            step = int(self.step or 1)
            return IntDistribution(int(self.low), int(self.high), log=log, step=step)
        return FloatDistribution(self.low, self.high, log=log, step=None if log else self.step)

    def grid(self, points: int) -> list[Scalar]:
        """The values a grid search tries: every choice; ``points`` spaced values."""
        if self.type == "categorical":
            return list(self.choices or [])
        assert self.low is not None and self.high is not None
        spaced = (np.geomspace if self.scale == "log" else np.linspace)(self.low, self.high, points)
        if self.type == "int":
            return [int(v) for v in sorted({round(float(v)) for v in spaced})]
        return [float(v) for v in spaced]


def load_space(data: Any, plan_nodes: Sequence[str]) -> list[Dimension]:
    """The dimensions of ``data`` (a list, or ``{"space": [...]}``), checked against the
    plan's nodes; a :class:`StudyError` names what is wrong and where."""
    items = data.get("space") if isinstance(data, Mapping) else data
    if not isinstance(items, list) or not items:
        raise StudyError("a search space is a non-empty list of dimensions")
    dims: list[Dimension] = []
    for index, item in enumerate(items):
        try:
            dim = Dimension.model_validate(item)
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(p) for p in problem["loc"])
            raise StudyError(
                f"space[{index}]{'.' + where if where else ''}: {problem['msg']}"
            ) from None
        if dim.node not in plan_nodes:
            raise StudyError(
                f"space[{index}].name: '{dim.name}' names node '{dim.node}', which is not a "
                f"node of the plan ({', '.join(sorted(plan_nodes)[:10])})"
            )
        if any(d.name == dim.name for d in dims):
            raise StudyError(f"space[{index}].name: '{dim.name}' appears twice")
        dims.append(dim)
    return dims


def suggest(trial: optuna.Trial, dims: Sequence[Dimension]) -> dict[str, Scalar]:
    """Ask the sampler (through ``trial``) for a value of every dimension."""
    return {dim.name: _suggest_one(trial, dim) for dim in dims}


def _suggest_one(trial: optuna.Trial, dim: Dimension) -> Scalar:
    found = dim.distribution()
    if isinstance(found, CategoricalDistribution):
        value: Scalar = trial.suggest_categorical(dim.name, list(found.choices))
        return value
    if isinstance(found, IntDistribution):
        return trial.suggest_int(dim.name, found.low, found.high, step=found.step, log=found.log)
    assert isinstance(found, FloatDistribution)
    return trial.suggest_float(dim.name, found.low, found.high, step=found.step, log=found.log)


def grid_space(dims: Sequence[Dimension], points: int) -> dict[str, list[Scalar]]:
    return {dim.name: dim.grid(points) for dim in dims}


def run_params(
    sampled: Mapping[str, Any], fixed: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, dict[str, Any]]:
    """``{"node.param": v}`` over the fixed ``{"node": {"param": v}}``: a run's params."""
    params = {node: dict(values) for node, values in (fixed or {}).items()}
    for name, value in sampled.items():
        node, param = name.split(".", 1)
        params.setdefault(node, {})[param] = value
    return params
