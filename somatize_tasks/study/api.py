"""``submit_study``: a study with a sampler and a pruner on the cluster, and its handle.

::

    study = submit_study(
        plan,
        space=[{"type": "float", "name": "train.lr", "low": 1e-4, "high": 0.1, "scale": "log"}],
        n_trials=40,
        objective="evaluate",            # a node's output; or "train.loss", a metric
        direction="minimize",
        strategy="bayesian",             # or "grid", "random" (startup_trials, grid_points)
        pruning=("median", 2),           # or ("percentile", 25.0, 2)
        seeds=[1, 2, 3],                 # each configuration once per experiment seed
        record="tune.study.json",        # kept after every trial; resume=True goes on
    )
    study.progress                       # 0.35: finished / planned, while it runs
    study.trials                         # every trial as a dict, live
    study.wait()                         # the best trial: {"number", "params", "value", ...}

The study runs in a thread of this process; its trials run on the workers,
``parallel`` at a time (default: every slot of every live worker). With a
fixed list ``trials=[...]`` instead of a space, the old form: one run per
entry, placed round-robin (a :class:`StudyRun`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, overload

from pydantic import ValidationError

from scheduler import load_plan_document
from somatize_tasks.catalog.entries import default_catalog
from somatize_tasks.config.connections import reaching_redis
from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import StudyError
from somatize_tasks.runtime.compile.inputs import check_run_inputs
from somatize_tasks.runtime.engine.context import producer_context
from somatize_tasks.runtime.producer.trials import StudyRun
from somatize_tasks.runtime.producer.trials import submit_study as submit_fixed
from somatize_tasks.study.driver import StudyDriver, TrialInputs
from somatize_tasks.study.record import Pruning, StudyRecord, StudySpec, TrialRecord
from somatize_tasks.study.sampling import grid_size
from somatize_tasks.study.space import load_space
from somatize_tasks.workers.registry import Registry

Params = Mapping[str, Mapping[str, Any]]


class StudyHandle:
    """A study going on in this process: follow it, wait for it, stop it."""

    def __init__(self, driver: StudyDriver) -> None:
        self.driver = driver
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="somatize-study", daemon=True)

    def start(self) -> StudyHandle:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self.driver.run(self._stop)
        except BaseException as exc:  # handed to wait()
            self._error = exc

    @property
    def study_id(self) -> str:
        return self.driver.record.study_id

    @property
    def total(self) -> int:
        return self.driver.spec.total

    @property
    def finished(self) -> int:
        with self.driver.lock:
            return self.driver.record.finished()

    @property
    def progress(self) -> float:
        """Finished trials / planned trials."""
        return self.finished / self.total

    @property
    def trials(self) -> list[dict[str, Any]]:
        """Every trial so far, as Soma's trial dicts (params, state, value, series...)."""
        with self.driver.lock:
            return [t.as_dict() for t in self.driver.record.trials]

    @property
    def best_trial(self) -> dict[str, Any] | None:
        with self.driver.lock:
            best = self.driver.record.best()
            return None if best is None else best.as_dict()

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The best trial once the study ends (a study error is raised here)."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"study {self.study_id} still running after {timeout} s")
        if self._error is not None:
            raise self._error
        return self.best_trial

    def stop(self) -> None:
        """Stop starting trials; the record keeps what ran (``resume=True`` goes on)."""
        self._stop.set()
        self._thread.join()


@overload
def submit_study(plan: Any, *, trials: list[Params], **options: Any) -> StudyRun: ...
@overload
def submit_study(plan: Any, *, space: Any, n_trials: int, **options: Any) -> StudyHandle: ...


def submit_study(plan: Any, **options: Any) -> StudyRun | StudyHandle:
    """A study of ``plan`` on the live workers: with ``space=`` and ``n_trials=``, sampled
    and pruned (see the module docstring); with ``trials=[...]``, a fixed list of runs."""
    if "trials" in options and "space" not in options:
        return submit_fixed(plan, **options)
    return start_study(plan, **options)


def start_study(
    plan: Any,
    *,
    space: Any = None,
    n_trials: int | None = None,
    objective: str | None = None,
    direction: str = "minimize",
    strategy: str = "bayesian",
    pruning: Sequence[Any] | None = None,
    seeds: Sequence[int] = (),
    seed: int | None = None,
    startup_trials: int = 10,
    grid_points: int = 5,
    parallel: int | None = None,
    record: str | Path | None = None,
    resume: bool = False,
    input: Any = None,
    params: Params | None = None,
    ops: Mapping[str, str] | None = None,
    cache: str = "on",
    name: str = "study",
    settings: Settings | None = None,
    on_trial: Callable[[TrialRecord], None] | None = None,
) -> StudyHandle:
    """Start a sampled study (the keywords as :func:`submit_study` documents them)."""
    path = None if record is None else Path(record)
    if resume:
        if path is None:
            raise StudyError("resume=True needs the study's record (record=PATH)")
        kept = StudyRecord.load(path)
        document = load_plan_document(kept.plan)
        _same_study(kept.spec, space, n_trials, objective, document.plan.node_ids())
    else:
        document = load_plan_document(plan)
        spec = _spec(
            document.plan.node_ids(),
            space=space,
            n_trials=n_trials,
            objective=objective,
            direction=direction,
            strategy=strategy,
            pruning=pruning,
            seeds=seeds,
            seed=seed,
            startup_trials=startup_trials,
            grid_points=grid_points,
            cache=cache,
            name=name,
        )
        kept = StudyRecord(spec=spec, plan=document.to_wire())
    check_run_inputs(document.plan, params, ops, default_catalog, wire=True)
    settings = settings or Settings.from_env()
    context = producer_context(settings)
    driver = StudyDriver(
        context,
        document,
        kept,
        path,
        TrialInputs(input=input, fixed=params, ops=ops),
        parallel or _free_slots(settings, context.redis, kept.spec.total),
        on_trial,
    )
    driver.save()
    return StudyHandle(driver).start()


def _same_study(
    spec: StudySpec, space: Any, n_trials: int | None, objective: str | None, nodes: list[str]
) -> None:
    """Resuming takes the record's study; what the caller also gave must agree with it."""
    differs = [
        name
        for name, given, kept in (
            ("space", None if space is None else load_space(space, nodes), spec.space),
            ("n_trials", n_trials, spec.n_trials),
            ("objective", objective, spec.objective),
        )
        if given is not None and given != kept
    ]
    if differs:
        raise StudyError(
            f"the study record holds another study ({', '.join(differs)} differ): resume it "
            "as it was, or start a new study with another record"
        )


def _spec(node_ids: list[str], **given: Any) -> StudySpec:
    objective = given.get("objective")
    if not objective:
        raise StudyError("a study needs an objective: a node id, or 'node.metric'")
    if objective.split(".", 1)[0] not in node_ids:
        raise StudyError(f"objective '{objective}' names no node of the plan")
    if given.get("n_trials") is None:
        raise StudyError("a study needs n_trials")
    pruning = given.pop("pruning")
    given["space"] = load_space(given["space"], node_ids)
    try:
        spec = StudySpec(pruning=_pruning(pruning), **given)
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(p) for p in problem["loc"])
        raise StudyError(f"{where}: {problem['msg']}") from None
    if spec.strategy == "grid" and spec.n_trials > grid_size(spec):
        spec = spec.model_copy(update={"n_trials": grid_size(spec)})  # the whole grid
    return spec


def _pruning(given: Sequence[Any] | Mapping[str, Any] | None) -> Pruning | None:
    """Soma's ``("median", warmup)`` or ``("percentile", pct, warmup)``, or a dict."""
    if given is None:
        return None
    if isinstance(given, Mapping):
        return Pruning.model_validate(given)
    kind, *rest = given
    if kind == "median":
        return Pruning(type="median", warmup=int(rest[0]) if rest else 0)
    if kind == "percentile" and rest:
        warmup = int(rest[1]) if len(rest) > 1 else 0
        return Pruning(type="percentile", percentile=float(rest[0]), warmup=warmup)
    raise StudyError(f"pruning {given!r}: use ('median', warmup) or ('percentile', pct, warmup)")


def _free_slots(settings: Settings, redis: Any, total: int) -> int:
    """Default parallelism: every slot of every live worker (at most the trials)."""
    live = reaching_redis(settings, Registry.from_settings(settings, redis).live)
    slots = sum(max(1, w.info.max_concurrent) for w in live)
    return max(1, min(total, slots))
