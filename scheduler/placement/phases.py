"""Grouping placed nodes into phases, in the order they run.

Nodes arrive in execution order. Outside any parallel, a sequential phase
is a maximal run of nodes on one worker; a new worker starts a new phase.
Everything inside an outermost ``Parallel`` forms one parallel phase, whose
``worker_ids`` name one worker per branch. A study trial is one phase of its
own, whatever it contains. Each node lands in exactly one phase, and
``phase_index`` counts up in execution order.

The walk appends to :attr:`PhaseBuilder.nodes` itself and calls
:meth:`PhaseBuilder.switch_worker` only when a node's worker differs from
:attr:`PhaseBuilder.worker_id`, which keeps the per-node cost to a
comparison and an append.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.model.distribution import PARALLEL, SEQUENTIAL, Phase


@dataclass
class PhaseDraft:
    """A phase being filled: its kind, its nodes and its workers."""

    phase: Phase
    node_ids: list[str] = field(default_factory=list)
    worker_ids: list[str] = field(default_factory=list)


class PhaseBuilder:
    """Collects nodes into phases as the placement walk visits them."""

    def __init__(self) -> None:
        self.drafts: list[PhaseDraft] = []
        #: The phase the next node runs in.
        self.phase: Phase = SEQUENTIAL
        #: The worker the open draft expects next; another worker calls switch_worker.
        self.worker_id: str | None = None
        #: The open draft's node list, appended to directly by the walk.
        self.nodes: list[str] = []
        self._draft: PhaseDraft | None = None
        self._parallel_depth = 0

    def switch_worker(self, worker_id: str) -> None:
        """The next node runs on ``worker_id``, not on :attr:`worker_id`."""
        if self.phase is SEQUENTIAL:
            self._open(SEQUENTIAL).worker_ids.append(worker_id)
        elif (
            self._draft is not None
            and self.phase.kind == "trial"
            and worker_id not in self._draft.worker_ids
        ):
            self._draft.worker_ids.append(worker_id)
        # A parallel phase names one worker per branch (see leave_parallel).
        self.worker_id = worker_id

    def enter_parallel(self) -> None:
        if not self._parallel_depth and self.phase is SEQUENTIAL:
            self._open(PARALLEL)
            self.phase = PARALLEL
        self._parallel_depth += 1

    def leave_parallel(self, branch_workers: list[str]) -> None:
        """A parallel is done; its branches went to ``branch_workers``, in order
        (the phase of an outermost parallel names them)."""
        if self._parallel_depth == 1 and self.phase is PARALLEL and self._draft is not None:
            self._draft.worker_ids.extend(branch_workers)
        self._parallel_depth -= 1
        if not self._parallel_depth and self.phase is PARALLEL:
            self._close()

    def start_trial(self, phase: Phase, worker_id: str) -> None:
        self._open(phase).worker_ids.append(worker_id)
        self.phase = phase
        self.worker_id = worker_id

    def end_trial(self) -> None:
        self._close()

    def _open(self, phase: Phase) -> PhaseDraft:
        draft = PhaseDraft(phase)
        self.drafts.append(draft)
        self._draft = draft
        self.nodes = draft.node_ids
        return draft

    def _close(self) -> None:
        """Back to sequential: the next node opens a new phase."""
        self.phase = SEQUENTIAL
        self.worker_id = None
        self._draft = None

    def finished(self) -> list[PhaseDraft]:
        """Non-empty phases in execution order."""
        return [d for d in self.drafts if d.node_ids]
