"""Trials on the cluster: runs of one plan with other parameters, placed by ``schedule_study``.

``submit_study(plan, trials=[...])`` runs a fixed list of trial parameters,
one run per trial, spread round-robin over the workers (placement rule 4).
:func:`place_trials` and :func:`start_trial` are what a sampling study
(:mod:`somatize_tasks.study`) uses to start the trials it asks for, as they
are asked for, in parallel across the workers.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from scheduler import DistributionPlan, ExecutionPlan, PlanDocument, load_plan, schedule_study
from somatize_tasks.catalog.entries import default_catalog
from somatize_tasks.config.connections import await_redis, reaching_redis
from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import NoWorkersError
from somatize_tasks.runtime.compile.inputs import check_run_inputs
from somatize_tasks.runtime.engine.context import RunContext, producer_context
from somatize_tasks.runtime.producer.handle import PlanRun
from somatize_tasks.runtime.producer.submit import Params, RunRequest, _place, _start
from somatize_tasks.workers.registry import Registry


def submit_study(
    plan: ExecutionPlan | str | bytes | Mapping[str, Any] | Any,
    *,
    trials: list[Params],
    input: Any = None,
    ops: Mapping[str, str] | None = None,
    differentiable_nodes: Iterable[str] = (),
    settings: Settings | None = None,
) -> StudyRun:
    """Run one trial per entry of ``trials`` (each maps node ids to parameters).

    Trials are placed round-robin across the workers by ``schedule_study``;
    each runs as a run of its own with its trial's parameters.
    """
    execution_plan = load_plan(plan)
    for trial in trials:
        check_run_inputs(execution_plan, trial, ops, default_catalog, wire=True)
    settings = settings or Settings.from_env()
    await_redis(settings)  # a paused or absent Redis: one line, within the retry budget
    context = producer_context(settings)
    study = place_trials(context, execution_plan, len(trials), differentiable_nodes)
    runs = []
    for index, trial in enumerate(trials):
        request = RunRequest(PlanDocument(execution_plan), input, trial, ops)
        runs.append(_start(context, request, trial_slice(study, index)))
    return StudyRun(runs, study)


def place_trials(
    context: RunContext,
    plan: ExecutionPlan,
    count: int,
    differentiable_nodes: Iterable[str] = (),
) -> DistributionPlan:
    """``count`` trials of ``plan`` placed round-robin over the live workers."""
    settings = context.settings
    live = reaching_redis(settings, Registry.from_settings(settings, context.redis).live)
    workers = [w.info for w in live]
    study = _place(
        lambda usable: schedule_study(plan, usable, count, differentiable_nodes), workers
    )
    if study.is_local:
        raise NoWorkersError(f"no live worker can run the study: {'; '.join(study.warnings)}")
    return study


def start_trial(
    context: RunContext,
    plan: PlanDocument,
    distribution: DistributionPlan,
    params: Params,
    *,
    input: Any = None,
    ops: Mapping[str, str] | None = None,
    cache: bool = True,
    seed: int | None = None,
    trial: Mapping[str, Any] | None = None,
    run_id: str | None = None,
) -> PlanRun:
    """Start one trial run where ``distribution`` (one trial's slice) places it, under
    ``run_id`` when given (a driver records it before the run exists)."""
    check_run_inputs(plan.plan, params, ops, default_catalog, wire=True)
    request = RunRequest(plan, input, params, ops, cache=cache, seed=seed, trial=trial)
    return _start(context, request, distribution, run_id)


class StudyRun:
    """The runs of a study, one per trial, in trial order."""

    def __init__(self, runs: list[PlanRun], distribution: DistributionPlan) -> None:
        self.runs = runs
        self.distribution = distribution

    def wait(self, timeout: float | None = None) -> list[Any]:
        """Every trial's output, in trial order (the first failure raises)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        results = []
        for run in self.runs:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            results.append(run.wait(timeout=left))
        return results

    def cancel(self) -> None:
        for run in self.runs:
            run.cancel()


def trial_slice(study: DistributionPlan, index: int) -> DistributionPlan:
    """Trial ``index``'s part of a study's placement: a run's distribution."""
    phases = [p for p in study.phases if p.phase_type.trial_index == index]
    return DistributionPlan(
        assignments=[a for a in study.assignments if a.phase.trial_index == index],
        phases=phases,
        data_transfers=[],
        warnings=study.warnings,
    )
