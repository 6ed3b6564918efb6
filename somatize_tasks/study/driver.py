"""The study's driver: asks for configurations, runs them as trials, prunes, records.

One loop, in one thread of the producer's process:

1. while fewer than ``parallel`` trials run and some are left, ask Optuna for
   a configuration (or take the next experiment seed of the current one) and
   start it as a run where :func:`place_trials` put that slot, so trials run
   on every worker at once; a configuration and seed the study already
   finished is answered from the record, not run again;
2. answer the reports trials make from inside their nodes (``report(...)``):
   record them, give the objective's ones to the pruner, and push its verdict
   back (a pruned trial's run is cancelled);
3. collect the runs that ended: the objective's value, told to Optuna, kept.

The record is saved after every change of a trial, so a driver killed at any
point is resumed from it (:func:`somatize_tasks.study.api.submit_study` with
``resume=True``): finished trials are replayed to the sampler and never run
again, trials whose runs went on without a driver are followed to their end.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from scheduler import DistributionPlan, PlanDocument
from somatize_tasks.errors import RunError, RunStateLostError, StudyError
from somatize_tasks.runtime.engine.context import RunContext
from somatize_tasks.runtime.producer.handle import PlanRun
from somatize_tasks.runtime.producer.submit import new_run_id
from somatize_tasks.runtime.producer.trials import place_trials, start_trial, trial_slice
from somatize_tasks.study.record import MetricPoint, StudyRecord, TrialRecord, TrialState
from somatize_tasks.study.sampling import new_study, replay, watches
from somatize_tasks.study.space import run_params, suggest

log = logging.getLogger(__name__)
POLL_S = 0.1
VERDICT_TTL_S = 60


@dataclass
class _Active:
    """A trial in flight: its Optuna trial, its run and the placement slot it holds."""

    optuna_trial: optuna.Trial
    run: PlanRun
    slot: int
    steps: set[int] = field(default_factory=set)


@dataclass
class TrialInputs:
    """What every trial's run gets besides its sampled parameters."""

    input: Any = None
    fixed: Mapping[str, Mapping[str, Any]] | None = None
    ops: Mapping[str, str] | None = None


class StudyDriver:
    """Runs one study to its end (see the module docstring)."""

    def __init__(
        self,
        context: RunContext,
        document: PlanDocument,
        record: StudyRecord,
        path: Path | None,
        inputs: TrialInputs,
        parallel: int,
        on_trial: Callable[[TrialRecord], None] | None = None,
    ) -> None:
        self.context, self.document, self.record, self.path = context, document, record, path
        self.inputs, self.parallel, self.on_trial = inputs, max(1, parallel), on_trial
        self.spec = record.spec
        self.lock = threading.Lock()
        self.optuna = new_study(self.spec, len(record.trials))
        replay(self.optuna, record)
        self.active: dict[int, _Active] = {}
        self.slots: list[DistributionPlan] = []
        self.reports = context.keys.study(record.study_id, "reports")
        self.pruned = context.keys.study(record.study_id, "pruned")

    # --- the loop ----------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None) -> StudyRecord:
        study = place_trials(self.context, self.document.plan, self.parallel)
        self.slots = [trial_slice(study, i) for i in range(self.parallel)]
        self._follow_unfinished()
        while not (stop is not None and stop.is_set()):
            self._launch_what_fits()
            self._answer_reports()
            self._collect_ended()
            if not self.active and len(self.record.trials) >= self.spec.total:
                break
        self.save()
        return self.record

    def _launch_what_fits(self) -> None:
        while len(self.active) < self.parallel and len(self.record.trials) < self.spec.total:
            self._launch(len(self.record.trials))

    # --- starting trials ---------------------------------------------------------------

    def _launch(self, number: int) -> None:
        seeds = self.spec.seeds
        seed = seeds[number % len(seeds)] if seeds else None
        first_of_config = not seeds or number % len(seeds) == 0
        if not first_of_config:  # the configuration's next seed: the same parameters
            config = self.record.trials[number - number % len(seeds)].params
            self.optuna.enqueue_trial(dict(config))
        trial = self.optuna.ask()
        params = suggest(trial, self.spec.space)
        earlier = self._same_as(params, seed)
        with self.lock:
            record = TrialRecord(number=number, params=params, seed=seed)
            self.record.trials.append(record)
        if earlier is not None:
            self._repeat(trial, record, earlier)
            return
        self._start(trial, record)

    def _start(self, trial: optuna.Trial, record: TrialRecord) -> None:
        """Start the trial's run, its id recorded first: a driver killed in between
        finds the run (or learns it never started) when resumed, never runs it twice."""
        slot = min(set(range(self.parallel)) - {a.slot for a in self.active.values()})
        with self.lock:
            record.run_id = new_run_id()
            record.worker = None
        self.save()
        run = start_trial(
            self.context,
            self.document,
            self.slots[slot],
            run_params(record.params, self.inputs.fixed),
            input=self.inputs.input,
            ops=self.inputs.ops,
            cache=self.spec.cache,
            seed=record.seed,
            trial={
                "study": self.record.study_id,
                "number": record.number,
                "params": record.params,
                "seed": record.seed,
            },
            run_id=record.run_id,
        )
        with self.lock:
            assignments = run.distribution.assignments
            record.worker = assignments[0].worker_id if assignments else None
        self.active[record.number] = _Active(trial, run, slot)
        self.save()

    def _same_as(self, params: dict[str, Any], seed: int | None) -> TrialRecord | None:
        """A finished trial of this configuration and seed (its result stands)."""
        for earlier in self.record.trials:
            same = earlier.params == params and earlier.seed == seed
            if same and earlier.state in ("completed", "pruned"):
                return earlier
        return None

    def _repeat(self, trial: optuna.Trial, record: TrialRecord, earlier: TrialRecord) -> None:
        with self.lock:
            record.repeat_of = earlier.number
            record.series = list(earlier.series)
            record.pruned_step = earlier.pruned_step
        if earlier.state == "pruned":
            self._end(trial, record, "pruned", earlier.value)
        else:
            self._end(trial, record, "completed", earlier.value)

    def _follow_unfinished(self) -> None:
        """Resuming: runs that went on without a driver are followed (or started again,
        if their run is gone), with the same number, parameters and seed."""
        for record in self.record.trials:
            if record.state != "running":
                continue
            self.optuna.enqueue_trial(dict(record.params))
            trial = self.optuna.ask()
            suggest(trial, self.spec.space)
            run = None
            if record.run_id is not None:
                try:
                    run = PlanRun.attach(record.run_id, self.context.settings)
                except RunStateLostError:
                    run = None
            if run is None:
                self._start(trial, record)
            else:
                taken = {a.slot for a in self.active.values()}
                free = sorted(set(range(self.parallel)) - taken) or [len(self.active)]
                self.active[record.number] = _Active(trial, run, free[0])

    # --- reports -----------------------------------------------------------------------

    def _answer_reports(self) -> None:
        redis = self.context.redis
        first = redis.blpop([self.reports], timeout=POLL_S)
        if first is None:
            return
        more = redis.lpop(self.reports, 100) or []
        for raw in [first[1], *more]:
            self._answer(json.loads(raw))

    def _answer(self, message: dict[str, Any]) -> None:
        number = int(message.get("trial", -1))
        stop = False
        if 0 <= number < len(self.record.trials):
            record = self.record.trials[number]
            point = MetricPoint.model_validate(message)
            with self.lock:
                record.series.append(point)
            stop = record.state == "pruned" or self._judge(number, point)
        verdict = self.context.keys.study(self.record.study_id, f"verdict:{message.get('id')}")
        pipe = self.context.redis.pipeline()
        pipe.rpush(verdict, "stop" if stop else "go")
        pipe.expire(verdict, VERDICT_TTL_S)
        pipe.execute()

    def _judge(self, number: int, point: MetricPoint) -> bool:
        """Give a watched report to the pruner; prune the trial if it says so."""
        active = self.active.get(number)
        if active is None or not watches(self.spec, point.node_id, point.name):
            return False
        if point.step in active.steps or not math.isfinite(point.value):
            return False
        active.steps.add(point.step)
        active.optuna_trial.report(point.value, point.step)
        if not active.optuna_trial.should_prune():
            return False
        pipe = self.context.redis.pipeline()
        pipe.sadd(self.pruned, number)
        pipe.expire(self.pruned, self.context.settings.run_ttl_s)
        pipe.execute()
        active.run.cancel()  # the rest of the trial is not worth its compute
        del self.active[number]
        record = self.record.trials[number]
        with self.lock:
            record.pruned_step = point.step
        self._end(active.optuna_trial, record, "pruned", point.value)
        return True

    # --- ends --------------------------------------------------------------------------

    def _collect_ended(self) -> None:
        if not self.active:
            return
        pipe = self.context.redis.pipeline()
        numbers = list(self.active)
        for number in numbers:
            pipe.hget(self.context.keys.run(self.active[number].run.id), "status")
        for number, raw in zip(numbers, pipe.execute(), strict=True):
            status = None if raw is None else raw.decode()
            if status in (None, "done", "failed", "cancelled"):
                self._ended(number, status)

    def _ended(self, number: int, status: str | None) -> None:
        active = self.active.pop(number)
        record = self.record.trials[number]
        try:
            if status is None:
                raise StudyError(f"the state of run {active.run.id} is gone from Redis")
            active.run.wait(timeout=10)
            value = self._objective(active.run, record)
        except (RunError, StudyError, LookupError) as exc:
            with self.lock:
                record.error = str(exc)
            self._end(active.optuna_trial, record, "failed", None)
            return
        self._end(active.optuna_trial, record, "completed", value)

    def _objective(self, run: PlanRun, record: TrialRecord) -> float:
        """The objective's value: the node's output, or its ``metric`` (a key of its
        output, else the last value the node reported under that name)."""
        node, metric = self.spec.objective_node, self.spec.objective_metric
        found: Any = run.result(node)
        if metric is not None:
            if isinstance(found, Mapping) and metric in found:
                found = found[metric]
            else:
                reported = [p.value for p in record.series if p.name == metric]
                found = reported[-1] if reported else None
        if (
            isinstance(found, bool)
            or not isinstance(found, int | float)
            or not math.isfinite(found)
        ):
            raise StudyError(
                f"objective '{self.spec.objective}' of trial {record.number} is {found!r}, "
                "not a finite number"
            )
        return float(found)

    def _end(
        self, trial: optuna.Trial, record: TrialRecord, state: TrialState, value: float | None
    ) -> None:
        with self.lock:
            record.state = state
            record.value = value
            record.finished_at = time.time()
        if state == "completed" and value is not None:
            self.optuna.tell(trial, value)
        elif state == "pruned":
            self.optuna.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            self.optuna.tell(trial, state=optuna.trial.TrialState.FAIL)
        self.save()
        if self.on_trial is not None:
            self.on_trial(record)

    def save(self) -> None:
        if self.path is not None:
            with self.lock:
                self.record.save(self.path)
