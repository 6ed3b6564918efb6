"""``schedule()`` and ``schedule_study()``: placing every node of a plan.

One walk over the plan, in execution order, linear in its size. Each
variant is placed by its own small method:

- A Sequence's steps share its lane's worker (rule 1: no data moves inside).
- A Parallel gives each branch a worker of its own choosing (rule 2):
  filter by the branch's requirement (its own ``Remote`` target, else the
  one of the ``Remote`` around the Parallel), then rank by spread, free
  slots, capability and id (:mod:`scheduler.scoring`). Each branch holds a
  slot until the parallel ends.
- A differentiable branch or Remote whose input comes from a differentiable
  node is kept on that node's worker (rule 3), unless its target forbids it.
- A Loop's body, a Branch's arms and a Step's handoffs run on their
  controller's worker; a Composite and a Stream run on one worker;
  Parallels and Remotes nested anywhere are placed on their own.
- ``Remote`` targets are hard: a ``Tag`` lands on a worker with the tag, a
  ``WorkerId`` on that worker, or :class:`PlacementError` says why not.
  Everything inside a Remote honours its target, nested Parallels included.
- Study trials go round-robin across the workers with capacity (rule 4).

Data edges follow DESIGN.md's runtime semantics: a Sequence feeds each step
into the next; every branch of a Parallel, every arm of a Branch (and the
Branch's own node) and a Loop's first pass read the input of their parent;
what follows a Parallel or Branch reads every branch's (arm's) terminal
node; a Step feeds its handoffs; Empty passes its input through; a Loop's
later passes read ``carry_from`` wherever the first pass read the Loop's
input (without ``carry_from`` every pass reads the Loop's input again), and
what follows the Loop reads ``carry_from``, else the body's terminal nodes.
With a predecessors graph (:mod:`scheduler.graph`) the edges are the
graph's instead, as Soma's executor reads them. Every edge whose ends are
on different workers is one ``DataTransfer``.

Speed: the walk keeps plain dicts, lists and tuples and builds the pydantic
output once at the end (:func:`scheduler.distribution.trusted`); reasons
are one string per lane, not per node; the garbage collector is paused
during the walk, which allocates many small objects and frees none.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from scheduler.distribution import (
    PARALLEL,
    Assignment,
    DataTransfer,
    DistributionPlan,
    Phase,
    PlanPhase,
    trusted,
)
from scheduler.errors import PlacementError
from scheduler.feasibility import Feasibility
from scheduler.graph import graph_edges
from scheduler.notices import plan_warnings
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

Ids = tuple[str, ...]


class Lane:
    """Where the nodes being placed run unless a rule says otherwise, and why.

    ``target``: the requirement of the ``Remote`` the lane is inside (None:
    any worker), which parallels nested in it must honour too.
    ``holds_slot``: the lane is a parallel branch holding one slot on its
    worker, which it lends out while a nested parallel or remote runs.
    """

    __slots__ = ("holds_slot", "reason", "target", "worker_id")

    def __init__(
        self,
        worker_id: str,
        reason: str,
        target: RemoteTarget | None = None,
        holds_slot: bool = False,
    ) -> None:
        self.worker_id = worker_id
        self.reason = reason
        self.target = target
        self.holds_slot = holds_slot

    def inner(self, reason: str) -> Lane:
        """The same worker, target and slot, for a controller's children."""
        return Lane(self.worker_id, reason, self.target, self.holds_slot)


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
    (checked by :func:`scheduler.graph.check_predecessors`), transfers follow
    that graph's edges: one per edge whose ends landed on different workers.
    """
    loaded = _plan_of(plan)
    root, notes = loaded.root, plan_warnings(loaded)
    feasibility = Feasibility(list(workers))
    early = _early_exit(feasibility)
    if early is not None:
        early.warnings.extend(notes)
        return early
    walk = _Walk(feasibility, frozenset(differentiable_nodes))
    walk.warnings.extend(notes)
    first = walk.ledger.ranked(feasibility.usable, wants_gpu=False)[0]
    lane = Lane(first.id, f"least loaded worker ({first.available_slots} free slots)")
    try:
        with _gc_paused():
            walk.graph = predecessors
            walk.place(root, (), lane)
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
    walk = _Walk(feasibility, frozenset(differentiable_nodes), keep_on_lane=True)
    usable = feasibility.usable
    with _gc_paused():
        for index in range(trials):
            worker = usable[index % len(usable)]
            walk.phases.start_trial(Phase.trial(index, trials), worker.id)
            reason = f"trial {index} of {trials}, round-robin over {len(usable)} workers"
            walk.place(root, (), Lane(worker.id, reason))
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
    walk.place(_root_of(plan), (), lane)
    return list(dict.fromkeys(walk.edges))


def exit_nodes(plan: ExecutionPlan | PlanNode) -> list[str]:
    """The nodes whose outputs make up a plan's (or sub-plan's) output, by the
    same rules as :func:`data_edges`: what a following step would read.

    A sub-plan with no nodes of its own (``Empty``) passes its input through
    and has none.
    """
    root = plan.root if isinstance(plan, ExecutionPlan) else plan
    walk, lane = _flow_walk()
    return list(walk.place(root, (), lane))


def _flow_walk() -> tuple[_Walk, Lane]:
    """A walk over one pseudo-worker: data flow without any placement."""
    anywhere = WorkerInfo(id="(any)", name="(any)", max_concurrent=1)
    return _Walk(_Anywhere([anywhere]), frozenset()), Lane(anywhere.id, "")


class _Anywhere(Feasibility):
    """One pseudo-worker that satisfies every target: placement without workers."""

    def eligible(self, target: RemoteTarget | None) -> list[WorkerInfo]:
        return self.usable

    def satisfies(self, worker_id: str, target: RemoteTarget | None) -> bool:
        return True


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: the walk builds many small objects
    and no cycles, and collections triggered by the allocations cost more
    than the walk itself on large plans."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


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


def _unique(ids: list[str]) -> Ids:
    return tuple(dict.fromkeys(ids))


Handler = Callable[["_Walk", Any, Ids, Lane], Ids]


class _Walk:
    """State of one placement walk: slots, placements, phases, transfers."""

    def __init__(
        self, feasibility: Feasibility, differentiable: frozenset[str], keep_on_lane: bool = False
    ) -> None:
        self.feasibility = feasibility
        self.ledger = SlotLedger(feasibility.free_slots)
        self.names = {w.id: w.name for w in feasibility.usable}
        self.differentiable = differentiable
        self.keep_on_lane = keep_on_lane
        self.phases = PhaseBuilder()
        self.worker_of: dict[str, str] = {}
        self.rows: list[dict[str, Any]] = []
        #: Cross-worker edges not yet turned into transfers, as DataTransfer
        #: fields. Each node is linked to its inputs once, so only a Loop's back
        #: edges can repeat one.
        self.pending: list[dict[str, str]] = []
        self._repeats_possible = False
        self.transfers: list[DataTransfer] = []
        #: Every data edge, when asked for (see data_edges); None: not recorded.
        self.edges: list[tuple[str, str]] | None = None
        #: A predecessors graph: its edges replace the plan-shaped ones.
        self.graph: Mapping[str, list[str]] | None = None
        self.warnings: list[str] = []
        self._fronts: dict[int, tuple[Ids, bool]] = {}

    # --- bookkeeping -----------------------------------------------------------------

    def put(self, node_id: str, worker_id: str, reason: str) -> None:
        """Record that ``node_id`` runs on ``worker_id``, next in execution order."""
        self.worker_of[node_id] = worker_id
        phases = self.phases
        if worker_id != phases.worker_id:
            phases.switch_worker(worker_id)
        phases.nodes.append(node_id)
        # Built here as the Assignment's own __dict__ (see result()).
        self.rows.append(
            {
                "node_id": node_id,
                "worker_id": worker_id,
                "worker_name": self.names[worker_id],
                "phase": phases.phase,
                "reason": reason,
            }
        )

    def link(self, sources: Ids, target: str, to_worker: str) -> None:
        """Data flows from each of ``sources`` to ``target`` (on ``to_worker``)."""
        if self.graph is not None:
            return  # the graph's edges are linked once, after the walk
        if self.edges is not None:
            self.edges.extend((source, target) for source in sources)
        worker_of = self.worker_of
        for source in sources:
            from_worker = worker_of[source]
            if from_worker != to_worker:
                # Built here as the DataTransfer's own __dict__ (see flush_transfers()).
                self.pending.append(
                    {
                        "from_node": source,
                        "to_node": target,
                        "from_worker": from_worker,
                        "to_worker": to_worker,
                        "transfer_type": "s3",
                    }
                )

    def link_graph(self) -> None:
        """One transfer candidate per graph edge whose ends are on different workers."""
        graph, self.graph = self.graph, None
        if graph is None:
            return
        worker_of = self.worker_of
        for target, sources in graph.items():
            self.link(tuple(dict.fromkeys(sources)), target, worker_of[target])

    def place(self, node: PlanNode, inputs: Ids, lane: Lane) -> Ids:
        """Place ``node`` reading from ``inputs``; return the nodes its output comes from."""
        return _HANDLERS[type(node)](self, node, inputs, lane)

    # --- variants --------------------------------------------------------------------

    def _execute(self, node: Execute, inputs: Ids, lane: Lane) -> Ids:
        node_id = node.node_id
        self.put(node_id, lane.worker_id, lane.reason)
        if inputs:
            self.link(inputs, node_id, lane.worker_id)
        return (node_id,)

    def _fused(self, node: Composite | Stream, inputs: Ids, lane: Lane) -> Ids:
        kind = "composite" if isinstance(node, Composite) else "stream"
        reason = f"{kind} block — one worker, one task ({lane.reason})"
        for node_id in node.node_ids_:
            self.put(node_id, lane.worker_id, reason)
        self.link(inputs, node.node_ids_[0], lane.worker_id)
        return (node.node_ids_[-1],)

    def _empty(self, node: Empty, inputs: Ids, lane: Lane) -> Ids:
        return inputs

    def _sequence(self, node: Sequence, inputs: Ids, lane: Lane) -> Ids:
        current = inputs
        for step in node.steps:
            current = _HANDLERS[type(step)](self, step, current, lane)
        return current

    def _step(self, node: Step, inputs: Ids, lane: Lane) -> Ids:
        self.put(node.node_id, lane.worker_id, lane.reason)
        self.link(inputs, node.node_id, lane.worker_id)
        if not node.handoffs:
            return (node.node_id,)
        outputs = [node.node_id]
        handoff_lane = lane.inner(f"handoff of step '{node.node_id}', on its worker")
        for _, plan in node.handoffs:
            outputs.extend(self.place(plan, (node.node_id,), handoff_lane))
        return _unique(outputs)

    def _loop(self, node: Loop, inputs: Ids, lane: Lane) -> Ids:
        self.put(node.node_id, lane.worker_id, "loop controller")
        body_lane = lane.inner(f"body of loop '{node.node_id}', on its controller's worker")
        terminals = self.place(node.body, inputs, body_lane)
        if node.carry_from is None:
            return terminals  # every pass reads the loop's input again
        carried = (node.carry_from,)
        worker_of = self.worker_of
        self._repeats_possible = True
        for entry in self.front(node.body)[0]:
            self.link(tuple(c for c in carried if c != entry), entry, worker_of[entry])
        return carried

    def _branch(self, node: Branch, inputs: Ids, lane: Lane) -> Ids:
        self.put(node.node_id, lane.worker_id, "branch condition")
        self.link(inputs, node.node_id, lane.worker_id)
        arm_lane = lane.inner(f"arm of branch '{node.node_id}', on its controller's worker")
        outputs: list[str] = []
        for _, arm in node.arms:
            outputs.extend(self.place(arm, inputs, arm_lane))
        return _unique(outputs)

    def _remote(self, node: Remote, inputs: Ids, lane: Lane) -> Ids:
        worker_id, reason = self._choose_remote(node, inputs, lane)
        inner = Lane(worker_id, reason, node.target, lane.holds_slot)
        if worker_id == lane.worker_id or not lane.holds_slot:
            return self.place(node.plan, inputs, inner)
        # The branch's slot moves to the remote's worker while the remote runs.
        self.ledger.give_back(lane.worker_id)
        self.ledger.take(worker_id)
        outputs = self.place(node.plan, inputs, inner)
        self.ledger.give_back(worker_id)
        self.ledger.take(lane.worker_id)
        return outputs

    def _parallel(self, node: Parallel, inputs: Ids, lane: Lane) -> Ids:
        if not node.branches:
            return inputs
        phases = self.phases
        phases.enter_parallel()
        if lane.holds_slot:
            self.ledger.give_back(lane.worker_id)
        picker = BranchPicker(self.ledger)
        lanes: dict[tuple[str, int, int], Lane] = {}
        # The lane's own group (any Remote around the parallel); Remote branches
        # look up their own.
        group = self.feasibility.eligible(lane.target)
        outputs: list[str] = []
        branch_workers: list[str] = []
        pinning = bool(self.differentiable) or self.keep_on_lane
        for branch in node.branches:
            if isinstance(branch, Remote):
                target: RemoteTarget | None = branch.target
                inner: PlanNode = branch.plan
                branch_group = self._group(branch, target)
            else:
                target, inner, branch_group = lane.target, branch, group
            # Rule 3 or a trial may fix the worker; otherwise load decides, and
            # branches on one worker for one reason share a Lane.
            branch_lane = (
                self._pinned_lane(branch, target, inputs, lane, picker) if pinning else None
            )
            if branch_lane is None:
                worker, free = picker.pick(branch_group, _wants_gpu(target))
                branch_lane = lanes.get((worker.id, free, id(branch_group)))
                if branch_lane is None:
                    branch_lane = self._load_lane(worker, free, target, branch_group, lanes)
            branch_workers.append(branch_lane.worker_id)
            if phases.phase is PARALLEL:  # the phase names branch workers at the end
                phases.worker_id = branch_lane.worker_id
            outputs.extend(_HANDLERS[type(inner)](self, inner, inputs, branch_lane))
        if picker.overflowed:
            self.warnings.append(
                f"{len(node.branches)} parallel branches (first node "
                f"'{_first_id(node)}') outnumber the free slots: {picker.overflowed} "
                "extra branches were spread in proportion to free slots and will queue"
            )
        picker.release_all()
        if lane.holds_slot:
            self.ledger.take(lane.worker_id)
        phases.leave_parallel(branch_workers)
        return _unique(outputs)

    # --- choosing a worker for a new lane -------------------------------------------

    def _pinned_lane(
        self,
        branch: PlanNode,
        target: RemoteTarget | None,
        inputs: Ids,
        lane: Lane,
        picker: BranchPicker,
    ) -> Lane | None:
        """The lane of a branch whose worker a rule fixes (differentiable, trial);
        it still takes a slot there when one is free. None: load decides."""
        pinned = self._rule_pinned(branch, target, inputs, lane)
        if pinned is None:
            return None
        worker_id, reason = pinned
        took_slot = picker.hold(self.feasibility.worker(worker_id))
        return Lane(worker_id, reason, target, holds_slot=took_slot)

    @staticmethod
    def _load_lane(
        worker: WorkerInfo,
        free: int,
        target: RemoteTarget | None,
        group: list[WorkerInfo],
        lanes: dict[tuple[str, int, int], Lane],
    ) -> Lane:
        """A new lane for branches placed on ``worker`` by load, when it had
        ``free`` slots (0: overflow) among ``group``."""
        reason = _choice_reason(target, group, free, "parallel branch")
        # An overflowing branch (nothing free) holds no slot, so lends none.
        lane = lanes[worker.id, free, id(group)] = Lane(worker.id, reason, target, free > 0)
        return lane

    def _choose_remote(self, node: Remote, inputs: Ids, lane: Lane) -> tuple[str, str]:
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
        self, node: PlanNode, target: RemoteTarget | None, inputs: Ids, lane: Lane
    ) -> tuple[str, str] | None:
        """A worker fixed by rule 3 (differentiable) or by a study trial, if any."""
        anchor = self._differentiable_anchor(node, inputs) if self.differentiable else None
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

    def _differentiable_anchor(self, node: PlanNode, inputs: Ids) -> tuple[str, str] | None:
        diff = self.differentiable
        source = next((i for i in inputs if i in diff), None)
        if source is None or not any(e in diff for e in self.front(node)[0]):
            return None
        return source, self.worker_of[source]

    def front(self, node: PlanNode) -> tuple[Ids, bool]:
        """The nodes that read ``node``'s input, and whether its input also
        passes through to its output (memoised: a Loop asks once per body)."""
        key = id(node)
        found = self._fronts.get(key)
        if found is None:
            found = self._fronts[key] = _front(node, self.front)
        return found

    # --- output ----------------------------------------------------------------------

    def flush_transfers(self) -> None:
        """Turn the cross-worker edges seen so far into transfers (once each)."""
        rows: Iterable[dict[str, str]] = self.pending
        if self._repeats_possible:
            rows = {(row["from_node"], row["to_node"]): row for row in rows}.values()
        self.transfers.extend(trusted(DataTransfer, rows))
        self.pending = []
        self._repeats_possible = False

    def result(self) -> DistributionPlan:
        assignments = trusted(Assignment, self.rows)
        phases = trusted(
            PlanPhase,
            (
                {
                    "phase_index": index,
                    "phase_type": draft.phase,
                    "node_ids": draft.node_ids,
                    "worker_ids": draft.worker_ids,
                }
                for index, draft in enumerate(self.phases.finished())
            ),
        )
        fields = {
            "assignments": assignments,
            "phases": phases,
            "data_transfers": self.transfers,
            "warnings": self.warnings,
        }
        return trusted(DistributionPlan, [fields])[0]


#: The placing method for each variant. A class-level table (not bound methods
#: on the walk) so that a walk holds no reference cycle and is freed the moment
#: it is done, without waiting for the garbage collector to look at it.
_HANDLERS: dict[type, Handler] = {
    Execute: _Walk._execute,
    Sequence: _Walk._sequence,
    Parallel: _Walk._parallel,
    Step: _Walk._step,
    Loop: _Walk._loop,
    Branch: _Walk._branch,
    Remote: _Walk._remote,
    Composite: _Walk._fused,
    Stream: _Walk._fused,
    Empty: _Walk._empty,
}


def _front(node: PlanNode, front: Callable[[PlanNode], tuple[Ids, bool]]) -> tuple[Ids, bool]:
    """See :meth:`_Walk.front`; ``front`` answers for children."""
    if isinstance(node, Execute | Step):
        return (node.node_id,), False
    if isinstance(node, Composite | Stream):
        return (node.node_ids_[0],), False
    if isinstance(node, Empty):
        return (), True
    if isinstance(node, Remote):
        return front(node.plan)
    if isinstance(node, Loop):
        entries, passes = front(node.body)
        return entries, passes and node.carry_from is None
    if isinstance(node, Sequence):
        found: list[str] = []
        for step in node.steps:
            entries, passes = front(step)
            found.extend(entries)
            if not passes:
                return _unique(found), False
        return _unique(found), True
    children = node.branches if isinstance(node, Parallel) else [arm for _, arm in node.arms]
    own = [node.node_id] if isinstance(node, Branch) else []
    fronts = [front(child) for child in children]
    entries = _unique(own + [e for child_entries, _ in fronts for e in child_entries])
    if isinstance(node, Parallel) and not children:
        return entries, True
    return entries, any(passes for _, passes in fronts)


def _wants_gpu(target: RemoteTarget | None) -> bool:
    return target is not None and target.tag == "gpu"


def _first_id(node: PlanNode) -> str:
    if isinstance(node, Remote):
        return node.node_id
    return next(node.iter_node_ids(), "(empty)")


def _choice_reason(
    target: RemoteTarget | None, group: list[WorkerInfo], free: int, what: str
) -> str:
    if target is not None and target.worker_id is not None:
        return f"pinned to worker '{target.worker_id}'"
    if target is not None and len(group) == 1:
        return f"only worker with tag '{target.tag}'"
    among = "" if target is None else f" of {len(group)} workers with tag '{target.tag}'"
    if free <= 0:
        return f"{what}: every eligible worker full; queued where slots are least overcommitted"
    return f"{what}: most free slots{among} ({free} free)"
