"""What a study is asked to do (:class:`StudySpec`) and what it did (:class:`StudyRecord`).

The record is one JSON file, rewritten (to a temporary name, then renamed)
after every change of a trial: start, report, end. It holds everything
``resume`` needs: the spec, the plan, and each trial's parameters, seed,
state, value, run id and reported series. JSON only, never pickle.

A trial's ``state``, as Soma's: ``running``, ``completed``, ``pruned`` (the
pruner stopped it; its series is kept) or ``failed`` (with the error).
"""

from __future__ import annotations

import math
import os
import time
import uuid
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from somatize_tasks.errors import StudyError
from somatize_tasks.study.space import Dimension

TrialState = Literal["running", "completed", "pruned", "failed"]
FINISHED: frozenset[str] = frozenset({"completed", "pruned", "failed"})


class Pruning(BaseModel):
    """Soma's pruning: ``median`` or ``percentile`` (of the trials completed so far, at
    the same step), after ``warmup`` steps and once ``startup`` trials completed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["median", "percentile"]
    percentile: Annotated[float, Field(ge=0, le=100)] = 50.0
    warmup: Annotated[int, Field(ge=0)] = 0
    startup: Annotated[int, Field(ge=0)] = 5


class StudySpec(BaseModel):
    """A study's question: where to search, how, for what, and how much."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "study"
    space: list[Dimension]
    strategy: Literal["grid", "random", "bayesian"] = "bayesian"
    n_trials: Annotated[int, Field(ge=1)]
    #: ``"node"`` (its output, a number) or ``"node.metric"``.
    objective: str = Field(min_length=1)
    direction: Literal["minimize", "maximize"] = "minimize"
    pruning: Pruning | None = None
    #: Experiment seeds: every sampled configuration runs once per seed.
    seeds: list[int] = Field(default_factory=list)
    #: The sampler's own seed (reproducible sampling), as Soma's strategy seed.
    seed: int | None = None
    #: Random trials before the bayesian sampler's model takes over.
    startup_trials: Annotated[int, Field(ge=0)] = 10
    #: Values per float/int dimension of a grid.
    grid_points: Annotated[int, Field(ge=2)] = 5
    cache: bool = True

    @field_validator("seeds")
    @classmethod
    def _distinct(cls, seeds: list[int]) -> list[int]:
        if len(set(seeds)) != len(seeds):
            raise ValueError("experiment seeds must be distinct")
        return seeds

    @property
    def objective_node(self) -> str:
        return self.objective.split(".", 1)[0]

    @property
    def objective_metric(self) -> str | None:
        parts = self.objective.split(".", 1)
        return parts[1] if len(parts) == 2 else None

    @property
    def total(self) -> int:
        """Trials to run: one per configuration and experiment seed."""
        return self.n_trials * max(1, len(self.seeds))


class MetricPoint(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    value: float
    step: int
    node_id: str = ""
    at: float = 0.0


class TrialRecord(BaseModel):
    """One trial: a configuration and seed, and how it went."""

    model_config = ConfigDict(extra="ignore")

    number: int
    params: dict[str, Any]
    seed: int | None = None
    state: TrialState = "running"
    value: float | None = None
    run_id: str | None = None
    worker: str | None = None
    series: list[MetricPoint] = Field(default_factory=list)
    started_at: float = Field(default_factory=time.time)
    finished_at: float | None = None
    pruned_step: int | None = None
    error: str | None = None
    #: A configuration and seed this study completed before: its result, not a new run.
    repeat_of: int | None = None

    @property
    def duration_ms(self) -> int | None:
        if self.finished_at is None:
            return None
        return round((self.finished_at - self.started_at) * 1000)

    def as_dict(self) -> dict[str, Any]:
        return {**self.model_dump(mode="json"), "duration_ms": self.duration_ms}


class StudyRecord(BaseModel):
    """The study as kept on disk after every trial."""

    model_config = ConfigDict(extra="ignore")

    version: int = 1
    study_id: str = Field(default_factory=lambda: uuid.uuid4().hex[:16])
    spec: StudySpec
    plan: Any
    trials: list[TrialRecord] = Field(default_factory=list)
    created_at: float = Field(default_factory=time.time)

    def best(self) -> TrialRecord | None:
        done = [t for t in self.trials if t.state == "completed" and t.value is not None]
        if not done:
            return None
        pick = min if self.spec.direction == "minimize" else max
        return pick(done, key=lambda t: float(t.value if t.value is not None else math.nan))

    def finished(self) -> int:
        return sum(1 for t in self.trials if t.state in FINISHED)

    def save(self, path: Path) -> None:
        """Atomically: a reader (or a resume) never sees half a record."""
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            temp.write_text(self.model_dump_json(indent=1))
            os.replace(temp, path)
        finally:
            temp.unlink(missing_ok=True)

    @classmethod
    def load(cls, path: Path) -> StudyRecord:
        try:
            return cls.model_validate_json(path.read_text())
        except FileNotFoundError:
            raise StudyError(f"no study record at {path}: nothing to resume") from None
        except (ValidationError, ValueError) as exc:
            raise StudyError(f"the study record {path} cannot be read: {exc}") from None
