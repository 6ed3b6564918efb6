"""Reading a run's outputs in the producer, within the caller's time.

A value that lives only in a worker's cache is asked for: the worker that
holds it uploads it to the shared store (``somatize.transfer.upload`` on
its queue), then this process downloads it. Waiting for that upload is
bounded by the caller's deadline and watched: the holder's heartbeat is
checked every second, so a holder that is gone is named at once
(:class:`~somatize_tasks.errors.OutputUnavailableError`) instead of after a
long timeout with Celery's bare ``TimeoutError``.

The run's final output never depends on this: the nodes that can make it
store their outputs in the shared store as they write them
(``Program.final_nodes``), so it outlives the worker that made it. What
a later node still needs is recomputed by the reaper while the run runs
(:mod:`somatize_tasks.runtime.recovery.recompute`).
"""

from __future__ import annotations

import time
from typing import Any

from celery.exceptions import TimeoutError as CeleryTimeoutError

from somatize_tasks.config.keys import TRANSFER_UPLOAD_TASK, queue_name, run_tag
from somatize_tasks.errors import OutputUnavailableError
from somatize_tasks.runtime.compile.values import Expr, materialize
from somatize_tasks.runtime.engine.context import RunContext
from somatize_tasks.store import ArtifactRef
from somatize_tasks.workers.registry import Registry

#: How often a wait for an upload looks at the holder's heartbeat.
POLL_S = 1.0


class OutputReader:
    """Materializes one run's value expressions here, before ``deadline`` (monotonic)."""

    def __init__(self, context: RunContext, run_id: str, deadline: float | None) -> None:
        self.context = context
        self.run_id = run_id
        self.deadline = deadline
        self._registry: Registry | None = None

    def read(self, expr: Expr) -> Any:
        return materialize(expr, self._fetch)

    def _fetch(self, ref: dict[str, Any]) -> Any:
        store = self.context.store
        artifact = ArtifactRef.model_validate(ref)
        if artifact.inline is None and not store.shared.exists(artifact.key, artifact.size):
            self._ask_holder(artifact)
        return store.get(artifact)

    def _ask_holder(self, artifact: ArtifactRef) -> None:
        """Have the worker holding ``artifact`` upload it; raise if it cannot in time."""
        holder = artifact.worker_id or ""
        self._check_alive(artifact.node_id, holder)
        pending = self.context.app.send_task(
            TRANSFER_UPLOAD_TASK,
            args=(artifact.as_json(),),
            queue=queue_name(holder),
            argsrepr=f"run={self.run_id} node={artifact.node_id} {holder}->producer",
            shadow=f"transfer:upload {artifact.node_id} {holder}->producer {run_tag(self.run_id)}",
        )
        while True:
            left = None if self.deadline is None else self.deadline - time.monotonic()
            if left is not None and left <= 0:
                raise OutputUnavailableError(
                    f"run {self.run_id}: the output of node '{artifact.node_id}' is held by "
                    f"worker '{holder}', which did not hand it over in time (it is alive but "
                    "busy, or stuck)",
                    node_id=artifact.node_id,
                    worker_id=holder,
                )
            try:
                pending.get(
                    timeout=POLL_S if left is None else min(POLL_S, left),
                    disable_sync_subtasks=False,
                )
                return
            except CeleryTimeoutError:
                self._check_alive(artifact.node_id, holder)

    def _check_alive(self, node_id: str, holder: str) -> None:
        if self._registry is None:
            self._registry = Registry.from_settings(self.context.settings, self.context.redis)
        if any(info.id == holder for info in self._registry.live_infos()):
            return
        raise OutputUnavailableError(
            f"run {self.run_id}: the output of node '{node_id}' lived only in the cache of "
            f"worker '{holder}', which is gone (no heartbeat); it cannot be read any more. "
            "Resubmit the run (a run's final output is kept in the shared store and "
            "survives this)",
            node_id=node_id,
            worker_id=holder,
        )
