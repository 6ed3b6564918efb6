"""``submit_plan``: the producer's way in (trials: :mod:`.trials`).

``submit_plan`` reads the live workers, schedules the plan, records the run
in Redis, publishes the blocks that can start and returns a
:class:`PlanRun` at once. With no live worker it runs the plan here, in
this process, with a warning (unless ``require_workers=True``). A plan with
no nodes at all (``"Empty"``) needs no worker: it ends at once with null.
"""

from __future__ import annotations

import json
import logging
import uuid
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler import (
    DistributionPlan,
    ExecutionPlan,
    PlacementError,
    PlanDocument,
    WorkerInfo,
    load_plan_document,
    plan_warnings,
    schedule,
)
from scheduler.model.depth import check_value_depth
from scheduler.placement.gc_pause import gc_paused
from somatize_tasks.authoring.request import run_parts
from somatize_tasks.catalog.entries import Catalog, default_catalog
from somatize_tasks.config.clock import redis_now
from somatize_tasks.config.connections import await_redis, reaching_redis
from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import NoWorkersError, PlanInputError
from somatize_tasks.runtime.compile.inputs import check_run_inputs
from somatize_tasks.runtime.compile.limits import RunLimits
from somatize_tasks.runtime.compile.modes import run_mode
from somatize_tasks.runtime.compile.program import compile_program
from somatize_tasks.runtime.compile.values import Expr, ref_expr
from somatize_tasks.runtime.engine.context import RunContext, producer_context, reservations_of
from somatize_tasks.runtime.engine.dispatch import CeleryDispatcher
from somatize_tasks.runtime.engine.engine import Engine
from somatize_tasks.runtime.producer.fitted_states import StatesFrom, states_to_use
from somatize_tasks.runtime.producer.handle import (
    PlanRun,
)
from somatize_tasks.runtime.producer.local import run_local
from somatize_tasks.runtime.producer.local_handle import LocalPlanRun
from somatize_tasks.runtime.producer.submit_trips import (
    dispatches_first,
    live_and_reserved,
    reserve_checking_keys,
)
from somatize_tasks.runtime.recovery.elected import sweep_producer_cache
from somatize_tasks.runtime.state.packing import distribution_json, pack_pieces
from somatize_tasks.runtime.worker.leaf import STATE_PREFIX
from somatize_tasks.workers.registry import Registry
from somatize_tasks.workers.reservations import unlock

log = logging.getLogger(__name__)
INPUT_NODE = "input"

Params = Mapping[str, Mapping[str, Any]]


@dataclass
class RunRequest:
    """Everything a run is asked to do besides where: its data, mode and states."""

    document: PlanDocument
    input: Any = None
    params: Params | None = None
    ops: Mapping[str, str] | None = None
    mode: str = "fit"
    y: Any = None
    states: dict[str, Any] = field(default_factory=dict)  # values to store for the run
    state_refs: dict[str, Expr] = field(default_factory=dict)  # already in the store
    limits: RunLimits = field(default_factory=RunLimits)
    fuse: bool = True
    cache: bool = True
    seed: int | None = None
    trial: Mapping[str, Any] | None = None

    @property
    def plan(self) -> ExecutionPlan:
        return self.document.plan


def submit_plan(
    plan: ExecutionPlan | PlanDocument | str | bytes | Mapping[str, Any] | Any,
    *,
    input: Any = None,
    params: Params | None = None,
    ops: Mapping[str, str] | None = None,
    differentiable_nodes: Iterable[str] = (),
    settings: Settings | None = None,
    require_workers: bool = False,
    catalog: Catalog | None = None,
    predecessors: Mapping[str, list[str]] | None = None,
    mode: str | None = None,
    y: Any = None,
    states_from: StatesFrom | None = None,
    deadline_s: float | None = None,
    max_node_deaths: int | None = None,
    fuse: bool | None = None,
    cache: str | None = None,
    seed: int | None = None,
    max_passes: int | None = None,
) -> PlanRun:
    """Start ``plan`` on the live workers and return its handle at once.

    ``plan`` may be a bare plan or ``{"plan": ..., "predecessors": ...}``
    (``predecessors`` here overrides the document's), or a plan built in Python
    (:mod:`somatize_tasks.authoring`), whose parameters and catalog names
    ``params`` and ``ops`` update node by node, or a Soma checkpoint bundle
    (``model.zip``, which runs forward with its states unless ``mode="fit"``). ``params`` maps node
    ids to keyword parameters, ``ops`` node ids to catalog names. ``mode``
    is ``"fit"`` (trainable Filters learn from ``input`` and labels ``y``;
    the run keeps their states) or ``"forward"`` (they use the states of
    ``states_from``: a fit run's id, a states file, or a dict of node id to
    state). ``catalog`` is used only when the plan runs locally.

    ``deadline_s``: the run fails (``RunDeadlineError``, naming what was still
    unfinished) if it has not ended this many seconds after submission.
    ``max_node_deaths``: a node whose worker died while running it this many
    times fails the run (``KilledWorkerError``); default
    ``SOMATIZE_MAX_NODE_DEATHS``. ``max_passes``: the most loop passes the run
    makes, all loops together (``RunBudgetError`` past it). Without their own,
    runs get the deployment's ``SOMATIZE_RUN_DEADLINE_S`` and
    ``SOMATIZE_RUN_MAX_PASSES``.
    ``fuse``: run consecutive same-worker Executes of a Sequence as one task
    (:mod:`~somatize_tasks.runtime.compile.fusion`); default ``SOMATIZE_FUSE_CHAINS``.

    ``cache``: ``"on"`` or ``"off"``, whether nodes use the content cache every
    worker shares (default ``SOMATIZE_CONTENT_CACHE``, on); ``seed``: the run's
    experiment seed, hashed into every cache key (each seed its own cache line).
    """
    limits = RunLimits(deadline_s, max_node_deaths, max_passes)
    with gc_paused():  # bulk allocations, no cycles: a wide plan parses twice as fast
        parts = run_parts(plan, params, ops, catalog)
        params, ops = parts.params, parts.ops
        if parts.states is not None and states_from is None and mode != "fit":
            states_from = parts.states  # a Soma bundle runs forward with its own states
        document = check_request(parts.document, predecessors, input, params, ops, catalog)
    settings = settings or Settings.from_env()
    limits = limits.with_defaults(settings.run_deadline_s, settings.run_max_passes)
    await_redis(settings)  # a paused or absent Redis: one line, within the retry budget
    context = producer_context(settings)
    request = RunRequest(document, input, params, ops, limits=limits, seed=check_seed(seed))
    request.cache = cache_choice(cache, settings)
    request.fuse = settings.fuse_chains if fuse is None else fuse
    request.states, request.state_refs = states_to_use(context, states_from)
    has_states = states_from is not None
    request.mode = run_mode(document.plan, mode, has_states, y is not None)
    request.y = y
    if not document.plan.node_ids():
        return _run_here(request, _nothing_to_place(document.plan), False, catalog, context)
    registry = Registry.from_settings(settings, context.redis)
    reservations = reservations_of(context)
    with reservations.placing():  # see somatize_tasks.workers.reservations
        read = reaching_redis(settings, lambda: live_and_reserved(registry, reservations))
        workers, reserved = read
        distribution = _place(
            lambda usable: schedule(
                document.plan, usable, differentiable_nodes, predecessors=document.predecessors
            ),
            reservations.count_in(workers, reserved),
        )
        if distribution.is_local:
            unlock()
            return _run_here(request, distribution, require_workers, catalog, context)
        with gc_paused():  # compiling and recording 200,000 blocks: no cycles either
            return _start(context, request, distribution)


def check_request(
    plan: Any,
    predecessors: Mapping[str, list[str]] | None = None,
    input: Any = None,
    params: Any = None,
    ops: Any = None,
    catalog: Catalog | None = None,
) -> PlanDocument:
    """Everything ``submit_plan`` checks before it talks to Redis: the plan document,
    ``params``/``ops`` (against ``catalog``, else the producer's default catalog) and
    the input's nesting. Raises only the project's errors; never records anything."""
    document = load_plan_document(plan, predecessors)
    check_run_inputs(document.plan, params, ops, catalog or default_catalog, wire=True)
    check_value_depth(input, "input")
    return document


def cache_choice(cache: str | None, settings: Settings) -> bool:
    """A run's ``cache`` option: ``"on"``, ``"off"``, or None for the setting."""
    if cache is None:
        return settings.content_cache
    if cache not in ("on", "off"):
        raise PlanInputError(f'cache must be "on" or "off", not {cache!r}')
    return cache == "on"


def check_seed(seed: Any) -> int | None:
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise PlanInputError(f"seed must be a whole number, not {seed!r}")
    return seed


def _nothing_to_place(plan: ExecutionPlan) -> DistributionPlan:
    return DistributionPlan(
        assignments=[], phases=[], data_transfers=[], warnings=plan_warnings(plan)
    )


def _place(
    schedule_on: Callable[[list[WorkerInfo]], DistributionPlan], workers: list[WorkerInfo]
) -> DistributionPlan:
    """Schedule; when the live workers are only busy (not missing), queue on them.

    The scheduler answers "all workers at capacity" with a local plan, and
    rejects a ``Remote`` whose every eligible worker is full ("not now"). A
    submitted run would rather wait in those workers' queues than run in the
    producer or fail, so the full workers are offered again with one slot
    each, ranked after any worker with real free slots.
    """
    try:
        placed = schedule_on(workers)
        if not placed.is_local or not workers:
            return placed
        busy = "; ".join(placed.warnings)
    except PlacementError as exc:
        if not exc.busy_only:
            raise
        busy = str(exc)
    placed = _queue_on_least_loaded(schedule_on, workers)
    placed.warnings.append(f"{busy} Queued on the busy workers instead.")
    return placed


def _queue_on_least_loaded(
    schedule_on: Callable[[list[WorkerInfo]], DistributionPlan], workers: list[WorkerInfo]
) -> DistributionPlan:
    """Offer one slot on the least loaded of the busy workers first (counting
    reservations, load can exceed the limit), so queued runs spread out too;
    else one slot on every busy worker."""

    def load(worker: WorkerInfo) -> float:
        return worker.active_jobs / max(1, worker.max_concurrent)

    least = min(load(w) for w in workers)
    lightest = [w if load(w) > least else _one_slot(w) for w in workers]
    try:
        placed = schedule_on(lightest)
        if not placed.is_local:
            return placed
    except PlacementError as exc:
        if not exc.busy_only:
            raise
    return schedule_on([_one_slot(w) for w in workers])


def _one_slot(worker: WorkerInfo) -> WorkerInfo:
    if worker.has_capacity:
        return worker
    return worker.model_copy(update={"active_jobs": max(0, worker.max_concurrent - 1)})


def _store_input(context: RunContext, run_id: str, value: Any, node_id: str = INPUT_NODE) -> Expr:
    """A run's value as an expression: inline if small, else in the shared store."""
    ref = context.store.put(run_id, node_id, 0, value)
    if ref.inline is None:
        context.store.upload(ref)
    return ref_expr(ref.as_json())


def new_run_id() -> str:
    return uuid.uuid4().hex[:16]


def _start(
    context: RunContext,
    request: RunRequest,
    distribution: DistributionPlan,
    run_id: str | None = None,
) -> PlanRun:
    run_id = run_id or new_run_id()
    reserve_checking_keys(context, run_id, distribution)
    plan, predecessors = request.plan, request.document.predecessors
    limits = (context.settings.node_soft_time_limit_s, context.settings.node_time_limit_s)
    labels = None if request.y is None else _store_input(context, run_id, request.y, "__labels__")
    states = dict(request.state_refs)
    states.update(
        {
            node_id: _store_input(context, run_id, value, STATE_PREFIX + node_id)
            for node_id, value in request.states.items()
        }
    )
    program = compile_program(
        plan,
        distribution,
        params=request.params,
        ops=request.ops,
        time_limits_s=limits,
        predecessors=predecessors,
        mode=request.mode,
        labels=labels,
        states=states,
        fused=None if request.fuse else [],
        cache=request.cache,
        seed=request.seed,
        trial=request.trial,
    )
    context.remember(run_id, program)
    state = context.state(run_id)
    input_expr = _store_input(context, run_id, request.input)
    created_at = redis_now(context.redis)  # deadlines are judged on Redis' clock
    meta: dict[str | bytes, bytes | float | int | str] = {
        **request.limits.meta(created_at),
        "status": "running",
        "plan": plan.model_dump_json(),
        "distribution": pack_pieces(distribution_json(distribution)),
        "params": json.dumps(program.params),
        "ops": json.dumps(program.ops),
        "input": json.dumps(input_expr),
        "node_count": program.node_count,
        "node_ids": json.dumps(plan.node_ids()),
        "created_at": created_at,
        "version": 0,
        "time_limits": json.dumps(limits),
        "mode": request.mode,
        "states": json.dumps(states),
        "fused": json.dumps(program.fused),
        "cache": "on" if request.cache else "off",
    }
    if request.seed is not None:
        meta["seed"] = request.seed
    if request.trial is not None:
        meta["trial"] = json.dumps(request.trial)
    if predecessors is not None:
        meta["predecessors"] = json.dumps(predecessors)
    if labels is not None:
        meta["labels"] = json.dumps(labels)

    def record_run(pipe: Any) -> None:
        pipe.hset(state.meta, mapping=meta)
        pipe.expire(state.meta, context.settings.run_ttl_s)
        pipe.zadd(context.keys.runs, {run_id: created_at})
        pipe.sadd(context.keys.active_runs, run_id)

    dispatcher = CeleryDispatcher(context, run_id, program, state)
    if dispatches_first(program):  # the run's record rides with its first block's
        dispatcher.prelude = record_run
    else:
        pipe = context.redis.pipeline()
        record_run(pipe)
        pipe.execute()
    sweep_producer_cache(context)
    for warning in distribution.warnings:
        log.warning("run %s: %s", run_id, warning)
    Engine(program, state, dispatcher).begin(input_expr)
    return PlanRun(run_id, context, distribution, submitted=True)


def _run_here(
    request: RunRequest,
    distribution: DistributionPlan,
    require_workers: bool,
    catalog: Catalog | None,
    context: RunContext,
) -> PlanRun:
    if request.plan.node_ids():
        reason = "; ".join(w for w in distribution.warnings) or "no live workers"
        if require_workers:  # refusing: the scheduler's "will execute locally" would be untrue
            raise NoWorkersError(reason.replace(" — will execute locally", ""))
        warnings.warn(f"{reason}: running the plan in this process", RuntimeWarning, stacklevel=3)
    states = dict(request.states)
    states.update({n: context.values.get_value(e["ref"]) for n, e in request.state_refs.items()})
    result = run_local(
        request.document,
        fuse=request.fuse,
        input=request.input,
        params=request.params,
        ops=request.ops,
        catalog=catalog,
        mode=request.mode,
        y=request.y,
        states=states if request.mode == "forward" else None,
        deadline_s=request.limits.deadline_s,
        max_passes=request.limits.max_passes,
    )
    return LocalPlanRun(result, distribution, len(request.plan.node_ids()))
