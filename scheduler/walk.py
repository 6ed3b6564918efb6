"""The placement walk: one pass over a plan that places every node.

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

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from scheduler.distribution import (
    PARALLEL,
    Assignment,
    DataTransfer,
    DistributionPlan,
    PlanPhase,
    trusted,
)
from scheduler.feasibility import Feasibility
from scheduler.lanes import Ids, Lane, choice_reason, first_id, unique, wants_gpu
from scheduler.phases import PhaseBuilder
from scheduler.plan import (
    Branch,
    Composite,
    Empty,
    Execute,
    Loop,
    Parallel,
    PlanNode,
    Remote,
    RemoteTarget,
    Sequence,
    Step,
    Stream,
)
from scheduler.scoring import BranchPicker, SlotLedger, least_loaded
from scheduler.workers import WorkerInfo

Handler = Callable[["Walk", Any, Ids, Lane], Ids]


class Walk:
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
        return HANDLERS[type(node)](self, node, inputs, lane)

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
            current = HANDLERS[type(step)](self, step, current, lane)
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
        return unique(outputs)

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
        return unique(outputs)

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
                worker, free = picker.pick(branch_group, wants_gpu(target))
                branch_lane = lanes.get((worker.id, free, id(branch_group)))
                if branch_lane is None:
                    branch_lane = self._load_lane(worker, free, target, branch_group, lanes)
            branch_workers.append(branch_lane.worker_id)
            if phases.phase is PARALLEL:  # the phase names branch workers at the end
                phases.worker_id = branch_lane.worker_id
            outputs.extend(HANDLERS[type(inner)](self, inner, inputs, branch_lane))
        if picker.overflowed:
            self.warnings.append(
                f"{len(node.branches)} parallel branches (first node "
                f"'{first_id(node)}') outnumber the free slots: {picker.overflowed} "
                "extra branches were spread in proportion to free slots and will queue"
            )
        picker.release_all()
        if lane.holds_slot:
            self.ledger.take(lane.worker_id)
        phases.leave_parallel(branch_workers)
        return unique(outputs)

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
        reason = choice_reason(target, group, free, "parallel branch")
        # An overflowing branch (nothing free) holds no slot, so lends none.
        lane = lanes[worker.id, free, id(group)] = Lane(worker.id, reason, target, free > 0)
        return lane

    def _choose_remote(self, node: Remote, inputs: Ids, lane: Lane) -> tuple[str, str]:
        group = self._group(node, node.target)
        pinned = self._rule_pinned(node.plan, node.target, inputs, lane)
        if pinned is not None:
            return pinned
        worker = least_loaded(group, self.ledger, wants_gpu(node.target))
        return worker.id, choice_reason(node.target, group, self.ledger.free[worker.id], "remote")

    def _group(self, node: PlanNode, target: RemoteTarget | None) -> list[WorkerInfo]:
        group = self.feasibility.eligible(target)
        if not group:
            assert target is not None
            raise self.feasibility.rejection(first_id(node), target)
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
                f"differentiable '{first_id(node)}' cannot stay with '{source}' on "
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
            found = self._fronts[key] = front_of(node, self.front)
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
HANDLERS: dict[type, Handler] = {
    Execute: Walk._execute,
    Sequence: Walk._sequence,
    Parallel: Walk._parallel,
    Step: Walk._step,
    Loop: Walk._loop,
    Branch: Walk._branch,
    Remote: Walk._remote,
    Composite: Walk._fused,
    Stream: Walk._fused,
    Empty: Walk._empty,
}


def front_of(node: PlanNode, front: Callable[[PlanNode], tuple[Ids, bool]]) -> tuple[Ids, bool]:
    """See :meth:`Walk.front`; ``front`` answers for children."""
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
                return unique(found), False
        return unique(found), True
    children = node.branches if isinstance(node, Parallel) else [arm for _, arm in node.arms]
    own = [node.node_id] if isinstance(node, Branch) else []
    fronts = [front(child) for child in children]
    entries = unique(own + [e for child_entries, _ in fronts for e in child_entries])
    if isinstance(node, Parallel) and not children:
        return entries, True
    return entries, any(passes for _, passes in fronts)
