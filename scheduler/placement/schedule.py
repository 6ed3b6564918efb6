"""``schedule()`` and ``schedule_study()``: placing every node of a plan.

The rules live with the walk that applies them (:mod:`scheduler.placement.walk` and
the modules it names); this module sets a walk up, runs it and handles
what comes before and after: no usable workers, a local fallback, studies,
and the data-flow questions (:func:`data_edges`, :func:`exit_nodes`)
answered by a walk over one pseudo-worker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from scheduler.errors import PlacementError
from scheduler.model.distribution import DistributionPlan, Phase
from scheduler.model.graph import graph_edges
from scheduler.model.plan import ExecutionPlan, PlanNode, RemoteTarget, load_plan, plan_warnings
from scheduler.model.workers import WorkerInfo
from scheduler.placement.feasibility import Feasibility
from scheduler.placement.gc_pause import gc_paused
from scheduler.placement.lanes import Lane
from scheduler.placement.walk import Walk
from scheduler.placement.walk_variants import place

NO_WORKERS = "No workers available — will execute locally"
ALL_FULL = "All workers are at capacity — will execute locally"


def schedule(
    plan: ExecutionPlan | PlanNode | Any,
    workers: Iterable[WorkerInfo],
    differentiable_nodes: Iterable[str] = (),
    *,
    allow_local_fallback: bool = False,
    predecessors: Mapping[str, list[str]] | None = None,
) -> DistributionPlan:
    """Place every node of ``plan`` on one of ``workers``.

    No workers, or none with a free slot: an empty plan with a warning
    (run locally). A ``Remote`` no worker can take raises
    :class:`PlacementError`, or with ``allow_local_fallback=True`` returns an
    empty plan carrying that message as a warning. With ``predecessors``
    (checked by :func:`scheduler.model.graph.check_predecessors`), transfers follow
    that graph's edges: one per edge whose ends landed on different workers.
    """
    loaded = _plan_of(plan)
    root, notes = loaded.root, plan_warnings(loaded)
    feasibility = Feasibility(list(workers))
    early = _early_exit(feasibility)
    if early is not None:
        early.warnings.extend(notes)
        return early
    walk = Walk(feasibility, frozenset(differentiable_nodes))
    walk.warnings.extend(notes)
    first = walk.ledger.ranked(feasibility.usable, wants_gpu=False)[0]
    lane = Lane(first.id, f"least loaded worker ({first.available_slots} free slots)")
    try:
        with gc_paused():
            walk.graph = predecessors
            place(walk, root, (), lane)
            walk.link_graph()
            walk.flush_transfers()
            result = walk.result()
            del walk  # its scaffolding goes now, unseen by the collector
        return result
    except PlacementError as exc:
        if not allow_local_fallback:
            raise
        return _local_plan(f"{exc} Falling back to local execution.")


def schedule_study(
    plan: ExecutionPlan | PlanNode | Any,
    workers: Iterable[WorkerInfo],
    trials: int,
    differentiable_nodes: Iterable[str] = (),
) -> DistributionPlan:
    """Place ``trials`` copies of ``plan``, trial i on the i-th worker round-robin.

    Workers with capacity are taken in id order. Each trial's nodes stay on
    its worker (a ``Remote`` still goes where its target says); assignments
    carry ``{"trial": {"trial_index": i, "total": trials}}``.
    """
    if trials < 0:
        raise ValueError(f"trials must be >= 0, got {trials}")
    loaded = _plan_of(plan)
    root = loaded.root
    feasibility = Feasibility(list(workers))
    early = _early_exit(feasibility)
    if early is not None:
        return early
    walk = Walk(feasibility, frozenset(differentiable_nodes), keep_on_lane=True)
    usable = feasibility.usable
    with gc_paused():
        for index in range(trials):
            worker = usable[index % len(usable)]
            walk.phases.start_trial(Phase.trial(index, trials), worker.id)
            reason = f"trial {index} of {trials}, round-robin over {len(usable)} workers"
            place(walk, root, (), Lane(worker.id, reason))
            walk.phases.end_trial()
            walk.flush_transfers()
        walk.warnings.extend(plan_warnings(loaded))
        result = walk.result()
        del walk  # as in schedule()
    return result


def data_edges(
    plan: ExecutionPlan | PlanNode | Any, predecessors: Mapping[str, list[str]] | None = None
) -> list[tuple[str, str]]:
    """Every (producer, consumer) pair of node ids the plan's data flows along,
    by the rules in this module's docstring, each once, in the order the walk
    meets them (a Loop's back edges right after its body); with a
    predecessors graph, that graph's edges.

    Placement-independent: the edges a :class:`DistributionPlan`'s transfers
    are drawn from (a transfer is an edge whose ends landed on different
    workers).
    """
    if predecessors is not None:
        return graph_edges(predecessors)
    walk, lane = _flow_walk()
    walk.edges = []
    place(walk, _root_of(plan), (), lane)
    return list(dict.fromkeys(walk.edges))


def exit_nodes(plan: ExecutionPlan | PlanNode) -> list[str]:
    """The nodes whose outputs make up a plan's (or sub-plan's) output, by the
    same rules as :func:`data_edges`: what a following step would read.

    A sub-plan with no nodes of its own (``Empty``) passes its input through
    and has none.
    """
    root = plan.root if isinstance(plan, ExecutionPlan) else plan
    walk, lane = _flow_walk()
    return list(place(walk, root, (), lane))


def _flow_walk() -> tuple[Walk, Lane]:
    """A walk over one pseudo-worker: data flow without any placement."""
    anywhere = WorkerInfo(id="(any)", name="(any)", max_concurrent=1)
    return Walk(_Anywhere([anywhere]), frozenset()), Lane(anywhere.id, "")


class _Anywhere(Feasibility):
    """One pseudo-worker that satisfies every target: placement without workers."""

    def eligible(self, target: RemoteTarget | None) -> list[WorkerInfo]:
        return self.usable

    def satisfies(self, worker_id: str, target: RemoteTarget | None) -> bool:
        return True


def _root_of(plan: Any) -> PlanNode:
    return _plan_of(plan).root


def _plan_of(plan: Any) -> ExecutionPlan:
    if isinstance(plan, ExecutionPlan):
        return plan
    return load_plan(plan)


def _early_exit(feasibility: Feasibility) -> DistributionPlan | None:
    if not feasibility.all_workers:
        return _local_plan(NO_WORKERS)
    if not feasibility.usable:
        return _local_plan(ALL_FULL)
    return None


def _local_plan(warning: str) -> DistributionPlan:
    return DistributionPlan(assignments=[], phases=[], data_transfers=[], warnings=[warning])
