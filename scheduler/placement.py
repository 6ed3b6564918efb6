"""``schedule()`` and ``schedule_study()``: placing every node of a plan.

One walk over the plan, in execution order, linear in its size. Each
variant is placed by its own small method:

- A Sequence's steps share its lane's worker (rule 1: no data moves inside).
- A Parallel gives each branch a worker of its own choosing (rule 2):
  filter by the branch's requirement (a ``Remote`` target), then rank by
  spread, free slots, capability and id (:mod:`scheduler.scoring`). Each
  branch holds a slot until the parallel ends.
- A differentiable branch or Remote whose input comes from a differentiable
  node is kept on that node's worker (rule 3), unless its target forbids it.
- A Loop's body, a Branch's arms and a Step's handoffs run on their
  controller's worker; a Composite and a Stream run on one worker;
  Parallels and Remotes nested anywhere are placed on their own.
- ``Remote`` targets are hard: a ``Tag`` lands on a worker with the tag, a
  ``WorkerId`` on that worker, or :class:`PlacementError` says why not.
- Study trials go round-robin across the workers with capacity (rule 4).

Data edges follow DESIGN.md's runtime semantics: a Sequence feeds each step
into the next; every branch of a Parallel, every arm of a Branch and a
Loop's first pass read the input of their parent; what follows a Parallel
or Branch reads every branch's (arm's) terminal node; a Step feeds its
handoffs; a Loop's later passes read ``carry_from`` (or the body's
terminal). Every edge whose ends are on different workers is one
``DataTransfer``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from scheduler.distribution import Assignment, DataTransfer, DistributionPlan, Phase, PlanPhase
from scheduler.errors import PlacementError
from scheduler.feasibility import Feasibility
from scheduler.phases import PhaseBuilder
from scheduler.plan import (
    Branch,
    Composite,
    Empty,
    Execute,
    ExecutionPlan,
    Loop,
    Parallel,
    PlanNode,
    Remote,
    RemoteTarget,
    Sequence,
    Step,
    Stream,
    load_plan,
)
from scheduler.scoring import BranchPicker, SlotLedger, least_loaded
from scheduler.workers import WorkerInfo

NO_WORKERS = "No workers available — will execute locally"
ALL_FULL = "All workers are at capacity — will execute locally"


@dataclass(frozen=True, slots=True)
class Lane:
    """Where the nodes being placed run unless a rule says otherwise, and why.

    ``holds_slot``: the lane is a parallel branch holding one slot on its
    worker, which it lends out while a nested parallel or remote runs.
    """

    worker_id: str
    reason: str
    holds_slot: bool = False


def schedule(
    plan: ExecutionPlan | PlanNode | Any,
    workers: Iterable[WorkerInfo],
    differentiable_nodes: Iterable[str] = (),
    *,
    allow_local_fallback: bool = False,
) -> DistributionPlan:
    """Place every node of ``plan`` on one of ``workers``.

    No workers, or none with a free slot: an empty plan with a warning
    (run locally). A ``Remote`` no worker can take raises
    :class:`PlacementError`, or with ``allow_local_fallback=True`` returns an
    empty plan carrying that message as a warning.
    """
    root = _root_of(plan)
    worker_list = list(workers)
    early = _early_exit(worker_list)
    if early is not None:
        return early
    walk = _Walk(Feasibility(worker_list), frozenset(differentiable_nodes))
    first = least_loaded(walk.feasibility.usable, walk.ledger, wants_gpu=False)
    lane = Lane(first.id, f"least loaded worker ({first.available_slots} free slots)")
    try:
        walk.place(root, [], lane)
    except PlacementError as exc:
        if not allow_local_fallback:
            raise
        return _local_plan(f"{exc} Falling back to local execution.")
    walk.flush_transfers()
    return walk.result()


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
    root = _root_of(plan)
    worker_list = list(workers)
    early = _early_exit(worker_list)
    if early is not None:
        return early
    walk = _Walk(Feasibility(worker_list), frozenset(differentiable_nodes), keep_on_lane=True)
    usable = walk.feasibility.usable
    for index in range(trials):
        worker = usable[index % len(usable)]
        walk.phases.start_trial(Phase.trial(index, trials), worker.id)
        lane = Lane(worker.id, f"trial {index} of {trials}, round-robin")
        walk.place(root, [], lane)
        walk.phases.end_trial()
        walk.flush_transfers()
    return walk.result()


def _root_of(plan: Any) -> PlanNode:
    if isinstance(plan, ExecutionPlan):
        return plan.root
    return load_plan(plan).root


def _early_exit(workers: list[WorkerInfo]) -> DistributionPlan | None:
    if not workers:
        return _local_plan(NO_WORKERS)
    if not any(w.has_capacity for w in workers):
        return _local_plan(ALL_FULL)
    return None


def _local_plan(warning: str) -> DistributionPlan:
    return DistributionPlan(assignments=[], phases=[], data_transfers=[], warnings=[warning])


def _unique(ids: list[str]) -> list[str]:
    return list(dict.fromkeys(ids)) if len(ids) > 1 else ids


def entry_ids(node: PlanNode) -> list[str]:
    """The nodes that read a sub-plan's input (its first nodes)."""
    if isinstance(node, Execute | Step):
        return [node.node_id]
    if isinstance(node, Composite | Stream):
        return [node.node_ids_[0]]
    if isinstance(node, Branch):
        return [node.node_id, *(i for _, arm in node.arms for i in entry_ids(arm))]
    if isinstance(node, Sequence):
        for step in node.steps:
            found = entry_ids(step)
            if found:
                return found
        return []
    if isinstance(node, Parallel):
        return [i for b in node.branches for i in entry_ids(b)]
    if isinstance(node, Loop):
        return entry_ids(node.body)
    if isinstance(node, Remote):
        return entry_ids(node.plan)
    return []


class _Walk:
    """State of one placement walk: slots, placements, phases, edges."""

    def __init__(
        self, feasibility: Feasibility, differentiable: frozenset[str], keep_on_lane: bool = False
    ) -> None:
        self.feasibility = feasibility
        self.ledger = SlotLedger(feasibility.usable)
        self.names = {w.id: w.name for w in feasibility.usable}
        self.differentiable = differentiable
        self.keep_on_lane = keep_on_lane
        self.phases = PhaseBuilder()
        self.placed: dict[str, str] = {}
        self.rows: list[tuple[str, str, Phase, str]] = []
        self.edges: list[tuple[str, str]] = []
        self.transfers: list[DataTransfer] = []
        self.warnings: list[str] = []
        self._handlers: dict[type, Callable[[Any, list[str], Lane], list[str]]] = {
            Execute: self._execute,
            Sequence: self._sequence,
            Parallel: self._parallel,
            Step: self._step,
            Loop: self._loop,
            Branch: self._branch,
            Remote: self._remote,
            Composite: self._fused,
            Stream: self._fused,
            Empty: self._empty,
        }

    # --- bookkeeping -----------------------------------------------------------------

    def assign(self, node_id: str, worker_id: str, reason: str) -> None:
        self.placed[node_id] = worker_id
        self.rows.append((node_id, worker_id, self.phases.current_phase(), reason))
        self.phases.add(node_id, worker_id)

    def link(self, sources: list[str], target: str) -> None:
        self.edges.extend((source, target) for source in sources)

    def place(self, node: PlanNode, inputs: list[str], lane: Lane) -> list[str]:
        """Place ``node`` reading from ``inputs``; return the nodes its output comes from."""
        return self._handlers[type(node)](node, inputs, lane)

    # --- variants --------------------------------------------------------------------

    def _execute(self, node: Execute, inputs: list[str], lane: Lane) -> list[str]:
        self.assign(node.node_id, lane.worker_id, lane.reason)
        self.link(inputs, node.node_id)
        return [node.node_id]

    def _fused(self, node: Composite | Stream, inputs: list[str], lane: Lane) -> list[str]:
        kind = "composite" if isinstance(node, Composite) else "stream"
        reason = f"{kind} block — one worker, one task ({lane.reason})"
        for node_id in node.node_ids_:
            self.assign(node_id, lane.worker_id, reason)
        self.link(inputs, node.node_ids_[0])
        return [node.node_ids_[-1]]

    def _empty(self, node: Empty, inputs: list[str], lane: Lane) -> list[str]:
        return inputs

    def _sequence(self, node: Sequence, inputs: list[str], lane: Lane) -> list[str]:
        current = inputs
        for step in node.steps:
            current = self.place(step, current, lane)
        return current

    def _step(self, node: Step, inputs: list[str], lane: Lane) -> list[str]:
        self.assign(node.node_id, lane.worker_id, lane.reason)
        self.link(inputs, node.node_id)
        outputs = [node.node_id]
        if node.handoffs:
            handoff_lane = Lane(
                lane.worker_id, f"handoff of step '{node.node_id}', on its worker", lane.holds_slot
            )
            for _, plan in node.handoffs:
                outputs.extend(self.place(plan, [node.node_id], handoff_lane))
        return _unique(outputs)

    def _loop(self, node: Loop, inputs: list[str], lane: Lane) -> list[str]:
        self.assign(node.node_id, lane.worker_id, "loop controller")
        body_lane = Lane(
            lane.worker_id, f"body of loop '{node.node_id}', on its controller's worker",
            lane.holds_slot,
        )  # fmt: skip
        terminals = self.place(node.body, inputs, body_lane)
        carried = [node.carry_from] if node.carry_from is not None else terminals
        for entry in entry_ids(node.body):
            self.link([c for c in carried if c != entry], entry)
        return carried

    def _branch(self, node: Branch, inputs: list[str], lane: Lane) -> list[str]:
        self.assign(node.node_id, lane.worker_id, "branch condition")
        self.link(inputs, node.node_id)
        arm_lane = Lane(
            lane.worker_id, f"arm of branch '{node.node_id}', on its controller's worker",
            lane.holds_slot,
        )  # fmt: skip
        outputs: list[str] = []
        for _, arm in node.arms:
            outputs.extend(self.place(arm, inputs, arm_lane))
        return _unique(outputs)

    def _remote(self, node: Remote, inputs: list[str], lane: Lane) -> list[str]:
        worker_id, reason = self._choose_remote(node, inputs, lane)
        if worker_id == lane.worker_id:
            return self.place(node.plan, inputs, Lane(worker_id, reason, lane.holds_slot))
        if lane.holds_slot:
            self.ledger.give_back(lane.worker_id)
            self.ledger.take(worker_id)
        outputs = self.place(node.plan, inputs, Lane(worker_id, reason, lane.holds_slot))
        if lane.holds_slot:
            self.ledger.give_back(worker_id)
            self.ledger.take(lane.worker_id)
        return outputs

    def _parallel(self, node: Parallel, inputs: list[str], lane: Lane) -> list[str]:
        if not node.branches:
            return inputs
        self.phases.enter_parallel()
        if lane.holds_slot:
            self.ledger.give_back(lane.worker_id)
        picker = BranchPicker(self.ledger)
        outputs: list[str] = []
        for branch in node.branches:
            target = branch.target if isinstance(branch, Remote) else None
            inner = branch.plan if isinstance(branch, Remote) else branch
            worker_id, reason = self._choose_branch(branch, target, inputs, lane, picker)
            self.phases.branch_worker(worker_id)
            outputs.extend(self.place(inner, inputs, Lane(worker_id, reason, holds_slot=True)))
        if picker.overflowed:
            self.warnings.append(
                f"{len(node.branches)} parallel branches (first node "
                f"'{_first_id(node)}') outnumber the free slots: {picker.overflowed} "
                "extra branches were spread in proportion to free slots and will queue"
            )
        picker.release_all()
        if lane.holds_slot:
            self.ledger.take(lane.worker_id)
        self.phases.leave_parallel()
        return _unique(outputs)

    # --- choosing a worker for a new lane -------------------------------------------

    def _choose_branch(
        self,
        branch: PlanNode,
        target: RemoteTarget | None,
        inputs: list[str],
        lane: Lane,
        picker: BranchPicker,
    ) -> tuple[str, str]:
        group = self._group(branch, target)
        pinned = self._rule_pinned(branch, target, inputs, lane)
        if pinned is not None:
            worker_id, reason = pinned
            picker.hold(self._worker(worker_id))
            return worker_id, reason
        worker = picker.pick(group, wants_gpu=_wants_gpu(target))
        free_before = self.ledger.free[worker.id] + 1
        return worker.id, _choice_reason(target, group, free_before, "parallel branch")

    def _choose_remote(self, node: Remote, inputs: list[str], lane: Lane) -> tuple[str, str]:
        group = self._group(node, node.target)
        pinned = self._rule_pinned(node.plan, node.target, inputs, lane)
        if pinned is not None:
            return pinned
        worker = least_loaded(group, self.ledger, _wants_gpu(node.target))
        return worker.id, _choice_reason(node.target, group, self.ledger.free[worker.id], "remote")

    def _group(self, node: PlanNode, target: RemoteTarget | None) -> list[WorkerInfo]:
        group = self.feasibility.eligible(target)
        if not group:
            assert target is not None
            raise self.feasibility.rejection(_first_id(node), target)
        return group

    def _rule_pinned(
        self, node: PlanNode, target: RemoteTarget | None, inputs: list[str], lane: Lane
    ) -> tuple[str, str] | None:
        """A worker fixed by rule 3 (differentiable) or by a study trial, if any."""
        anchor = self._differentiable_anchor(node, inputs)
        if anchor is not None:
            source, worker_id = anchor
            if self.feasibility.satisfies(worker_id, target):
                return worker_id, f"differentiable with '{source}'"
            assert target is not None
            self.warnings.append(
                f"differentiable '{_first_id(node)}' cannot stay with '{source}' on "
                f"'{worker_id}': its target is {target.describe()}; gradients will cross workers"
            )
        if self.keep_on_lane and self.feasibility.satisfies(lane.worker_id, target):
            return lane.worker_id, lane.reason
        return None

    def _differentiable_anchor(self, node: PlanNode, inputs: list[str]) -> tuple[str, str] | None:
        if not self.differentiable:
            return None
        diff = self.differentiable
        source = next((i for i in inputs if i in diff), None)
        if source is None or not any(e in diff for e in entry_ids(node)):
            return None
        return source, self.placed[source]

    def _worker(self, worker_id: str) -> WorkerInfo:
        return next(w for w in self.feasibility.usable if w.id == worker_id)

    # --- output ----------------------------------------------------------------------

    def flush_transfers(self) -> None:
        """Turn the edges seen so far into transfers (one per cross-worker edge)."""
        placed = self.placed
        seen: set[tuple[str, str]] = set()
        for source, target in self.edges:
            from_worker, to_worker = placed[source], placed[target]
            if from_worker != to_worker and (source, target) not in seen:
                seen.add((source, target))
                self.transfers.append(
                    DataTransfer.model_construct(
                        from_node=source,
                        to_node=target,
                        from_worker=from_worker,
                        to_worker=to_worker,
                        transfer_type="s3",
                    )  # fmt: skip
                )
        self.edges.clear()

    def result(self) -> DistributionPlan:
        names = self.names
        assignments = [
            Assignment.model_construct(
                node_id=node_id,
                worker_id=worker_id,
                worker_name=names[worker_id],
                phase=phase,
                reason=reason,
            )  # fmt: skip
            for node_id, worker_id, phase, reason in self.rows
        ]
        phases = [
            PlanPhase.model_construct(
                phase_index=index,
                phase_type=draft.phase,
                node_ids=draft.node_ids,
                worker_ids=draft.worker_ids,
            )  # fmt: skip
            for index, draft in enumerate(self.phases.finished())
        ]
        return DistributionPlan.model_construct(
            assignments=assignments, phases=phases,
            data_transfers=self.transfers, warnings=self.warnings,
        )  # fmt: skip


def _wants_gpu(target: RemoteTarget | None) -> bool:
    return target is not None and target.tag == "gpu"


def _first_id(node: PlanNode) -> str:
    if isinstance(node, Remote):
        return node.node_id
    return next(node.iter_node_ids(), "(empty)")


def _choice_reason(
    target: RemoteTarget | None, group: list[WorkerInfo], free: int, what: str
) -> str:
    if target is None:
        return f"{what}: most free slots ({free} free)"
    if target.worker_id is not None:
        return f"pinned to worker '{target.worker_id}'"
    if len(group) == 1:
        return f"only worker with tag '{target.tag}'"
    return f"most free slots of {len(group)} workers with tag '{target.tag}' ({free} free)"
