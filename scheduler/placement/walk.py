"""The placement walk: one pass over a plan that places every node.

One walk over the plan, in execution order, linear in its size. This module
holds the walk's state and bookkeeping: which worker each node runs on,
the phases, the data edges and the transfers they become, and the
:class:`DistributionPlan` built at the end. What each variant does is
:mod:`scheduler.placement.walk_variants` (the placement rules and data edges, one
function per variant); how a new lane's worker is chosen is
:mod:`scheduler.placement.walk_choice`; the entry points that set a walk up are
:mod:`scheduler.placement.schedule`.

With a predecessors graph (:mod:`scheduler.model.graph`) the edges are the
graph's instead of the plan-shaped ones, as Soma's executor reads them.
Every edge whose ends are on different workers is one ``DataTransfer``.

Speed: the walk keeps plain dicts, lists and tuples and builds the pydantic
output once at the end (:func:`scheduler.model.distribution.trusted`); reasons
are one string per lane, not per node; the garbage collector is paused
during the walk, which allocates many small objects and frees none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from scheduler.model.distribution import (
    Assignment,
    DataTransfer,
    DistributionPlan,
    PlanPhase,
    trusted,
)
from scheduler.model.plan import (
    Branch,
    Composite,
    Empty,
    Execute,
    Loop,
    Parallel,
    PlanNode,
    Remote,
    Sequence,
    Step,
    Stream,
)
from scheduler.placement.feasibility import Feasibility
from scheduler.placement.lanes import Ids, unique
from scheduler.placement.phases import PhaseBuilder
from scheduler.placement.scoring import SlotLedger


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
        #: Whether ``pending`` may hold an edge twice (set by a Loop with ``carry_from``).
        self.repeats_possible = False
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
        if self.repeats_possible:
            rows = {(row["from_node"], row["to_node"]): row for row in rows}.values()
        self.transfers.extend(trusted(DataTransfer, rows))
        self.pending = []
        self.repeats_possible = False

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


__all__ = ["Walk", "front_of"]
