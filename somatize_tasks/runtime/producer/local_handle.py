"""``LocalPlanRun``: the handle of a run that already happened in this process.

``submit_plan`` returns one when no live worker can take the plan and the
caller allows running it here; it answers the :class:`PlanRun` questions
from the local run's result, with nothing to watch or fetch.
"""

from __future__ import annotations

import uuid
from typing import Any

from scheduler import DistributionPlan
from somatize_tasks.errors import NodeFailedError
from somatize_tasks.runtime.producer.handle import NodeStatus, PlanRun, Progress, RunStatus
from somatize_tasks.runtime.producer.local import LocalRunResult
from somatize_tasks.runtime.state.run_state import DONE, FAILED


class LocalPlanRun(PlanRun):
    """A run that already happened in this process (the no-worker fallback)."""

    def __init__(self, result: LocalRunResult, distribution: DistributionPlan, total: int) -> None:
        self.id = f"local-{uuid.uuid4().hex[:12]}"
        self.distribution = distribution
        self._result = result
        self._total = total

    @property
    def warnings(self) -> list[str]:
        """Placement's, then the run's own (a loop stopped at its cap), each once."""
        placed = list(self.distribution.warnings)
        return placed + [w for w in self._result.warnings if w not in placed]

    def status(self) -> RunStatus:
        nodes = {
            n: NodeStatus(s["state"], s.get("worker"), s.get("started_at"), s.get("ended_at"))
            for n, s in self._result.nodes.items()
        }
        return RunStatus(self.id, self._result.status, nodes, self._result.error)

    def progress(self) -> Progress:
        return Progress(
            sum(1 for s in self._result.nodes.values() if s["state"] == DONE), self._total
        )

    def wait(self, timeout: float | None = None) -> Any:
        if self._result.status == FAILED:
            raise NodeFailedError(self.id, self._result.error or {})
        return self._result.output

    def result(self, node_id: str, *, timeout: float | None = 60.0) -> Any:
        raise LookupError("a local run keeps only its final output; use wait()")

    def states(self, *, timeout: float | None = 60.0) -> dict[str, Any]:
        return dict(self._result.states)

    def cancel(self) -> bool:
        return False

    def watch(self) -> None:
        """Nothing to watch: the run already happened in this process."""
