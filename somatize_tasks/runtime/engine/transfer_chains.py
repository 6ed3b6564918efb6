"""The transfer chain that brings one missing value to a block's worker.

``upload`` (the source worker's queue) -> ``download`` (the target worker's
queue) -> ``input_ready`` (the target's queue), with ``transfer_failed`` as
the errback. Every step's task id is chosen before anything is published and
recorded in the waiting block's status (``chain``: ``[worker, task id]``
pairs), so the orphan rule (:mod:`~somatize_tasks.runtime.recovery.orphans`) can tell
a chain still on its way (a step queued or held by its worker) from one that
vanished (a message popped by a worker's consumer just as Redis died: kombu's
Redis transport removes a message from its queue before it records it as
unacknowledged). Without the ids such a block waited ``transfer_stall_s``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from celery import Celery, chain
from kombu.utils.uuid import uuid

from somatize_tasks.config.keys import (
    INPUT_READY_TASK,
    TRANSFER_DOWNLOAD_TASK,
    TRANSFER_FAILED_TASK,
    TRANSFER_UPLOAD_TASK,
    queue_name,
    run_tag,
)
from somatize_tasks.runtime.compile.blocks import Block


@dataclass(frozen=True)
class ChainStep:
    """One step of a transfer chain: its task, the worker whose queue takes it, its id."""

    task: str
    worker: str
    task_id: str


@dataclass(frozen=True)
class TransferChain:
    """The steps that bring ``ref`` (a value on another worker) to ``target``."""

    ref: dict[str, Any]
    target: str
    steps: tuple[ChainStep, ...]

    @classmethod
    def plan(cls, ref: dict[str, Any], target: str, upload: bool) -> TransferChain:
        """The chain's steps, ids chosen now (``upload``: the source puts it in the store)."""
        source = str(ref.get("worker_id") or "")
        steps = [ChainStep(TRANSFER_UPLOAD_TASK, source, uuid())] if upload else []
        steps += [
            ChainStep(TRANSFER_DOWNLOAD_TASK, target, uuid()),
            ChainStep(INPUT_READY_TASK, target, uuid()),
        ]
        return cls(ref, target, tuple(steps))

    def watched(self) -> list[list[str]]:
        """``[worker, task id]`` of every step, for the waiting block's status."""
        return [[step.worker, step.task_id] for step in self.steps]

    def signature(self, app: Celery, run_id: str, block: Block, epoch: int, task_id: str) -> chain:
        """The Celery chain (not yet published), with its errback."""
        source = self.ref.get("worker_id")
        shown = f"run={run_id} node={self.ref['node_id']} {source}->{self.target}"
        route = f"{self.ref['node_id']} {source}->{self.target}"
        names = {
            TRANSFER_UPLOAD_TASK: "upload",
            TRANSFER_DOWNLOAD_TASK: "download",
            INPUT_READY_TASK: "ready",
        }
        ready_args = (run_id, block.index, epoch, self.ref, task_id)
        steps = [
            app.signature(
                step.task,
                args=ready_args if step.task == INPUT_READY_TASK else (self.ref,),
                immutable=True,
                queue=queue_name(step.worker),
                task_id=step.task_id,
                argsrepr=shown,
                ignore_result=True,
                shadow=f"transfer:{names[step.task]} {route} {run_tag(run_id)}",
            )
            for step in self.steps
        ]
        transfer = chain(*steps)
        # Fails the run, naming the store's error.
        transfer.link_error(
            app.signature(TRANSFER_FAILED_TASK, args=(run_id, block.index, epoch, task_id))
        )
        return transfer


def transfer_record(ref: dict[str, Any], block: Block, worker: str, kind: str, at: float) -> str:
    """One line of a run's transfer log (status, timeline); ``at``: Redis' time."""
    return json.dumps(
        {
            "from_node": ref["node_id"],
            "to_node": block.task_node_ids()[0],
            "from_worker": ref.get("worker_id"),
            "to_worker": worker,
            "transfer_type": kind,
            "bytes": ref.get("size", 0),
            "at": at,
        }
    )
