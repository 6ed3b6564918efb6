"""Optuna behind a study: its samplers and pruners, through the ask/tell interface.

The study's driver asks Optuna for a configuration (``ask``), runs it on the
cluster, feeds it the trial's reports (``report``, ``should_prune``) and
tells it the result (``tell``). Optuna's study lives in memory only: the
study record is the truth, and :func:`replay` gives a fresh Optuna study
every trial the record holds, so a resumed study samples as if it had never
stopped.

- ``grid``: :class:`optuna.samplers.GridSampler` over every categorical choice
  and ``grid_points`` values per numeric dimension;
- ``random``: :class:`optuna.samplers.RandomSampler`;
- ``bayesian``: :class:`optuna.samplers.TPESampler` (random for its first
  ``startup_trials``; a constant liar, so trials running in parallel are not
  asked the same point);
- pruning ``median`` / ``percentile``: Optuna's ``MedianPruner`` /
  ``PercentilePruner`` with the spec's warm-up steps and startup trials.
"""

from __future__ import annotations

import math
from typing import Any

import optuna
from optuna.trial import TrialState as OptunaState

from somatize_tasks.study.record import StudyRecord, StudySpec, TrialRecord
from somatize_tasks.study.space import grid_space

optuna.logging.set_verbosity(optuna.logging.WARNING)


def grid_size(spec: StudySpec) -> int:
    return math.prod(len(values) for values in grid_space(spec.space, spec.grid_points).values())


class _Grid(optuna.samplers.GridSampler):
    """A grid that does not stop its study when it is covered: ``study.stop()`` works
    only inside ``optimize``, and the driver counts the trials itself."""

    def after_trial(self, *args: Any, **kwargs: Any) -> None:
        return None


def sampler_for(spec: StudySpec, resumed_at: int = 0) -> optuna.samplers.BaseSampler:
    """The spec's sampler. Resumed after ``resumed_at`` trials, its seed moves on by as
    many: a sampler seeded as before would draw the first trials' points again."""
    seed = None if spec.seed is None else spec.seed + resumed_at
    if spec.strategy == "grid":
        return _Grid(grid_space(spec.space, spec.grid_points), seed=seed)
    if spec.strategy == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(
        seed=seed, n_startup_trials=spec.startup_trials, constant_liar=True
    )


def pruner_for(spec: StudySpec) -> optuna.pruners.BasePruner:
    pruning = spec.pruning
    if pruning is None:
        return optuna.pruners.NopPruner()
    if pruning.type == "median":
        return optuna.pruners.MedianPruner(
            n_startup_trials=pruning.startup, n_warmup_steps=pruning.warmup
        )
    return optuna.pruners.PercentilePruner(
        pruning.percentile, n_startup_trials=pruning.startup, n_warmup_steps=pruning.warmup
    )


def new_study(spec: StudySpec, resumed_at: int = 0) -> optuna.Study:
    return optuna.create_study(
        sampler=sampler_for(spec, resumed_at), pruner=pruner_for(spec), direction=spec.direction
    )


def replay(study: optuna.Study, record: StudyRecord) -> None:
    """Give ``study`` every finished trial of ``record`` (a resume, or a reload)."""
    distributions = {dim.name: dim.distribution() for dim in record.spec.space}
    for trial in record.trials:
        state = _STATES.get(trial.state)
        if state is None:
            continue
        study.add_trial(
            optuna.trial.create_trial(
                state=state,
                value=trial.value if state == OptunaState.COMPLETE else None,
                params={k: v for k, v in trial.params.items() if k in distributions},
                distributions=distributions,
                intermediate_values=watched_series(record.spec, trial),
            )
        )


_STATES = {
    "completed": OptunaState.COMPLETE,
    "pruned": OptunaState.PRUNED,
    "failed": OptunaState.FAIL,
}


def watches(spec: StudySpec, node_id: str, name: str) -> bool:
    """Whether the pruner watches this report: the objective's metric, or with a plain
    ``node`` objective, whatever that node reports."""
    if spec.objective_metric is not None:
        return name == spec.objective_metric and node_id in ("", spec.objective_node)
    return node_id == spec.objective_node


def watched_series(spec: StudySpec, trial: TrialRecord) -> dict[int, float]:
    return {p.step: p.value for p in trial.series if watches(spec, p.node_id, p.name)}
