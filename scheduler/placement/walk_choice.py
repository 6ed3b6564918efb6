"""Choosing the worker for a new lane: a parallel branch's or a Remote's.

Why a module of its own: these are the placement rules that pick a worker
rather than follow one, kept apart from the per-variant walk
(:mod:`scheduler.placement.walk_variants`) that calls them:

- ``Remote`` targets are hard: the candidates are the workers the target
  allows (a ``Tag``, a ``WorkerId``), else :class:`PlacementError` says why not.
- Rule 3: a differentiable branch or Remote whose input comes from a
  differentiable node stays on that node's worker, unless its target forbids
  it (then a warning says gradients will cross workers).
- Rule 4: in a study, a trial's parallel branches and Remotes stay on the
  trial's worker (``keep_on_lane``) where their target allows it.
- Otherwise load decides (:mod:`scheduler.placement.scoring`): most free slots, then
  capability and id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scheduler.model.plan import PlanNode, Remote, RemoteTarget
from scheduler.model.workers import WorkerInfo
from scheduler.placement.lanes import Ids, Lane, choice_reason, first_id, wants_gpu
from scheduler.placement.scoring import BranchPicker, least_loaded

if TYPE_CHECKING:
    from scheduler.placement.walk import Walk


def pinned_lane(
    walk: Walk,
    branch: PlanNode,
    target: RemoteTarget | None,
    inputs: Ids,
    lane: Lane,
    picker: BranchPicker,
) -> Lane | None:
    """The lane of a branch whose worker a rule fixes (differentiable, trial);
    it still takes a slot there when one is free. None: load decides."""
    pinned = _rule_pinned(walk, branch, target, inputs, lane)
    if pinned is None:
        return None
    worker_id, reason = pinned
    took_slot = picker.hold(walk.feasibility.worker(worker_id))
    return Lane(worker_id, reason, target, holds_slot=took_slot)


def load_lane(
    worker: WorkerInfo,
    free: int,
    target: RemoteTarget | None,
    group: list[WorkerInfo],
    lanes: dict[tuple[str, int, int], Lane],
) -> Lane:
    """A new lane for branches placed on ``worker`` by load, when it had
    ``free`` slots (0: overflow) among ``group``."""
    reason = choice_reason(target, group, free, "parallel branch")
    # An overflowing branch (nothing free) holds no slot, so lends none.
    lane = lanes[worker.id, free, id(group)] = Lane(worker.id, reason, target, free > 0)
    return lane


def choose_remote(walk: Walk, node: Remote, inputs: Ids, lane: Lane) -> tuple[str, str]:
    """The worker a Remote runs on, and why: a rule's, else the least loaded of its target's."""
    group = eligible_group(walk, node, node.target)
    pinned = _rule_pinned(walk, node.plan, node.target, inputs, lane)
    if pinned is not None:
        return pinned
    worker = least_loaded(group, walk.ledger, wants_gpu(node.target))
    return worker.id, choice_reason(node.target, group, walk.ledger.free[worker.id], "remote")


def eligible_group(walk: Walk, node: PlanNode, target: RemoteTarget | None) -> list[WorkerInfo]:
    """The workers ``target`` allows, or :class:`PlacementError` naming ``node``'s first id."""
    group = walk.feasibility.eligible(target)
    if not group:
        assert target is not None
        raise walk.feasibility.rejection(first_id(node), target)
    return group


def _rule_pinned(
    walk: Walk, node: PlanNode, target: RemoteTarget | None, inputs: Ids, lane: Lane
) -> tuple[str, str] | None:
    """A worker fixed by rule 3 (differentiable) or by a study trial, if any."""
    anchor = _differentiable_anchor(walk, node, inputs) if walk.differentiable else None
    if anchor is not None:
        source, worker_id = anchor
        if walk.feasibility.satisfies(worker_id, target):
            return worker_id, f"differentiable with '{source}'"
        assert target is not None
        walk.warnings.append(
            f"differentiable '{first_id(node)}' cannot stay with '{source}' on "
            f"'{worker_id}': its target is {target.describe()}; gradients will cross workers"
        )
    if walk.keep_on_lane and walk.feasibility.satisfies(lane.worker_id, target):
        return lane.worker_id, lane.reason
    return None


def _differentiable_anchor(walk: Walk, node: PlanNode, inputs: Ids) -> tuple[str, str] | None:
    diff = walk.differentiable
    source = next((i for i in inputs if i in diff), None)
    if source is None or not any(e in diff for e in walk.front(node)[0]):
        return None
    return source, walk.worker_of[source]
