"""Publishing task blocks to their workers' queues, with the transfers they need.

A block whose inputs all live on its worker (or travel inline) is published
at once. Otherwise each missing value gets a small Celery chain,
``upload`` (source worker's queue) -> ``download`` (target worker's queue)
-> ``input_ready`` (target queue), and the block is published by the
``input_ready`` that brings its pending-transfer counter to zero. Nothing
ever waits on a result: every step is started by the one before it.
"""

from __future__ import annotations

import json
import time
from typing import Any

from celery import chain
from celery.canvas import Signature
from kombu.utils.uuid import uuid

from somatize_tasks.keys import TRANSFER_DOWNLOAD_TASK, TRANSFER_UPLOAD_TASK, queue_name
from somatize_tasks.runtime.context import PRODUCER, RunContext
from somatize_tasks.runtime.program import Block, Program
from somatize_tasks.runtime.redis_state import RedisRunState
from somatize_tasks.runtime.values import Expr, refs_in

NODE_TASK = "somatize.node.run"
INPUT_READY_TASK = "somatize.run.input_ready"
TRANSFER_FAILED_TASK = "somatize.run.transfer_failed"


class CeleryDispatcher:
    """The engine's dispatcher for distributed runs."""

    def __init__(
        self,
        context: RunContext,
        run_id: str,
        program: Program,
        state: RedisRunState,
        *,
        unavailable: set[str] | frozenset[str] = frozenset(),
    ) -> None:
        self.context = context
        self.run_id = run_id
        self.program = program
        self.state = state
        # Sources that need no upload step: the producer put its values in the
        # shared store itself, and the reaper checked that whatever it still
        # needs from a dead worker is there. Any other source uploads first.
        self._no_upload: set[str | None] = {None, PRODUCER, *unavailable}
        self._avoiding = {"avoiding": sorted(unavailable)} if unavailable else {}

    def dispatch(self, block: Block, epoch: int, input_expr: Expr) -> None:
        """Publish ``block`` (after the transfers it needs) under a fresh task id.

        The input is saved and the task id recorded first, so the reaper can
        re-dispatch the block elsewhere, and a stale copy of the message
        (``mark_running`` compares task ids) is dropped instead of run twice.
        """
        worker = block.worker_id or ""
        missing, direct = self._classify(input_expr, worker)
        task_id = uuid()
        self.state.record_dispatch(
            block.task_node_ids(), block.index, epoch, input_expr,
            self._pending(block, epoch, task_id, waiting_for="transfers" if missing else None),
            missing=len(missing),
            transfer_records=[transfer_record(r, block, worker, "direct") for r in direct],
        )  # fmt: skip
        if not missing:
            self._send(block, epoch, input_expr, task_id)
            return
        for ref in missing:
            self._transfer_chain(ref, worker, block, epoch, task_id).apply_async()

    def publish_node(self, block: Block, epoch: int, input_expr: Expr, task_id: str) -> None:
        """The block's transfers are done: publish it under the task id it waits for."""
        self.state.set_status(block.task_node_ids(), self._pending(block, epoch, task_id))
        self._send(block, epoch, input_expr, task_id)

    def wait_for_recompute(
        self, block: Block, epoch: int, producers: list[tuple[int, int]]
    ) -> None:
        """``block`` waits for lost inputs to be computed again by ``producers``."""
        self.state.await_recompute(block.index, epoch, producers)
        status = self._pending(block, epoch, uuid(), waiting_for="recompute")
        self.state.set_status(block.task_node_ids(), status)

    def _pending(
        self, block: Block, epoch: int, task_id: str, waiting_for: str | None = None
    ) -> dict[str, Any]:
        """The status of a block published (or about to be) under ``task_id``."""
        status: dict[str, Any] = {
            "state": "pending", "worker": block.worker_id, "block": block.index, "epoch": epoch,
            "task_id": task_id, "queued_at": time.time(), **self._avoiding,
        }  # fmt: skip
        if waiting_for:
            status["waiting_for"] = waiting_for
        return status

    def _send(self, block: Block, epoch: int, input_expr: Expr, task_id: str) -> None:
        soft_s, hard_s = self.program.time_limits_s
        self.context.app.send_task(
            NODE_TASK,
            kwargs={
                "run_id": self.run_id,
                "block": block.index,
                "epoch": epoch,
                "input": input_expr,
            },
            queue=queue_name(block.worker_id or ""),
            task_id=task_id,
            kwargsrepr=_describe(self.run_id, block.task_node_ids(), epoch),
            shadow=node_shadow(block.task_node_ids()),
            soft_time_limit=soft_s,  # type: ignore[arg-type]  # floats work; the stubs say int
            time_limit=hard_s,  # type: ignore[arg-type]
        )

    def run_finished(self, status: str, output: Expr | None) -> None:
        """Nothing to publish: waiters watch the run's state in Redis."""

    # --- transfers -------------------------------------------------------------------

    def _classify(
        self, input_expr: Expr, worker: str
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Refs the block's worker must fetch first, and inline ones crossing workers."""
        missing: dict[str, dict[str, Any]] = {}
        direct: list[dict[str, Any]] = []
        for ref in refs_in(input_expr):
            if ref.get("worker_id") == worker:
                continue
            if ref.get("inline") is not None:
                direct.append(ref)
            else:
                missing.setdefault(f"{ref['node_id']}#{ref.get('iteration', 0)}", ref)
        return list(missing.values()), direct

    def _transfer_chain(
        self, ref: dict[str, Any], worker: str, block: Block, epoch: int, task_id: str
    ) -> chain:
        app = self.context.app
        steps: list[Signature] = []
        source = ref.get("worker_id")
        shown = f"run={self.run_id} node={ref['node_id']} {source}->{worker}"
        route = f"{ref['node_id']} {source}->{worker}"
        if source not in self._no_upload:
            steps.append(
                app.signature(
                    TRANSFER_UPLOAD_TASK,
                    args=(ref,),
                    immutable=True,
                    queue=queue_name(source or ""),
                    argsrepr=shown,
                    shadow=f"transfer:upload {route}",
                )
            )
        steps.append(
            app.signature(
                TRANSFER_DOWNLOAD_TASK,
                args=(ref,),
                immutable=True,
                queue=queue_name(worker),
                argsrepr=shown,
                shadow=f"transfer:download {route}",
            )
        )
        steps.append(app.signature(
            INPUT_READY_TASK, args=(self.run_id, block.index, epoch, ref, task_id), immutable=True,
            queue=queue_name(worker), argsrepr=shown, shadow=f"transfer:ready {route}",
        ))  # fmt: skip
        failed = app.signature(
            TRANSFER_FAILED_TASK, args=(self.run_id, block.index, epoch, task_id)
        )
        transfer = chain(*steps)
        transfer.link_error(failed)  # fails the run, naming the store's error
        return transfer


def transfer_record(ref: dict[str, Any], block: Block, worker: str, kind: str) -> str:
    """One line of a run's transfer log (status, timeline)."""
    return json.dumps({
        "from_node": ref["node_id"], "to_node": block.task_node_ids()[0],
        "from_worker": ref.get("worker_id"), "to_worker": worker,
        "transfer_type": kind, "bytes": ref.get("size", 0), "at": time.time(),
    })  # fmt: skip


def node_shadow(nodes: list[str]) -> str:
    """The name Flower lists a node task under (``node:train_svm``); the task
    itself stays ``somatize.node.run``, so routing never depends on it."""
    return "node:" + "+".join(nodes)


def _describe(run_id: str, nodes: list[str], epoch: int) -> str:
    """What Flower shows for a node task's arguments: ids, never values."""
    shown = nodes[0] if len(nodes) == 1 else "+".join(nodes)
    suffix = f" pass={epoch}" if epoch else ""
    return f"run={run_id} node={shown}{suffix}"
