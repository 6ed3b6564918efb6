"""Grouping placed nodes into phases, in the order they run.

Nodes arrive in execution order. Outside any parallel, a sequential phase
is a maximal run of nodes on one worker; a new worker starts a new phase.
Everything inside an outermost ``Parallel`` forms one parallel phase, whose
``worker_ids`` name one worker per branch. Each node lands in exactly one
phase, and ``phase_index`` counts up in execution order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.distribution import PARALLEL, SEQUENTIAL, Phase


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
        self._current: PhaseDraft | None = None
        self._parallel_depth = 0
        self._trial: Phase | None = None

    @property
    def in_parallel(self) -> bool:
        return self._parallel_depth > 0

    def current_phase(self) -> Phase:
        if self._trial is not None:
            return self._trial
        return PARALLEL if self._parallel_depth else SEQUENTIAL

    def add(self, node_id: str, worker_id: str) -> None:
        """Record the next node to run (in execution order)."""
        current = self._current
        if self._trial is not None or self._parallel_depth:
            assert current is not None
            current.node_ids.append(node_id)
            if self._trial is not None and worker_id not in current.worker_ids:
                current.worker_ids.append(worker_id)
            return
        if current is None or current.worker_ids[0] != worker_id:
            current = self._open(SEQUENTIAL)
            current.worker_ids.append(worker_id)
        current.node_ids.append(node_id)

    def enter_parallel(self) -> None:
        if not self._parallel_depth and self._trial is None:
            self._open(PARALLEL)
        self._parallel_depth += 1

    def branch_worker(self, worker_id: str) -> None:
        """A branch of the outermost parallel went to ``worker_id``."""
        if self._parallel_depth == 1 and self._trial is None and self._current is not None:
            self._current.worker_ids.append(worker_id)

    def leave_parallel(self) -> None:
        self._parallel_depth -= 1
        if not self._parallel_depth and self._trial is None:
            self._current = None

    def start_trial(self, phase: Phase, worker_id: str) -> None:
        """A study trial is one phase of its own, whatever it contains."""
        self._open(phase).worker_ids.append(worker_id)
        self._trial = phase

    def end_trial(self) -> None:
        self._trial = None
        self._current = None

    def _open(self, phase: Phase) -> PhaseDraft:
        draft = PhaseDraft(phase)
        self.drafts.append(draft)
        self._current = draft
        return draft

    def finished(self) -> list[PhaseDraft]:
        """Non-empty phases in execution order."""
        return [d for d in self.drafts if d.node_ids]
