"""The transfer chain that brings one missing value to a block's worker.

Through S3: ``upload`` (the source worker's queue) -> ``download`` (the
target worker's queue) -> ``input_ready`` (the target's queue). Direct
(``SOMATIZE_TRANSFER`` ``auto`` or ``direct``, both workers announced as
peers): one ``pull`` on the target's queue, which takes the value from its
holder and counts it arrived itself; when it cannot, an ``auto`` pull puts
the S3 chain in its place (:mod:`~somatize_tasks.runtime.worker.pulls`).
Either has ``transfer_failed`` as the errback.

Every step's task id is chosen before anything is published and recorded
in the waiting block's status (``chain``: ``[worker, task id]`` pairs), so
the orphan rule (:mod:`~somatize_tasks.runtime.recovery.orphans`) can tell a
chain still on its way (a step queued or held by its worker) from one that
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
    TRANSFER_PULL_TASK,
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
    #: Why a direct pull gave way to this S3 chain (kept in its transfer record).
    fallback: str | None = None

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

    @classmethod
    def pull(cls, ref: dict[str, Any], target: str) -> TransferChain:
        """A direct transfer: one ``pull`` step on the target's queue."""
        return cls(ref, target, (ChainStep(TRANSFER_PULL_TASK, target, uuid()),))

    @property
    def direct(self) -> bool:
        return self.steps[0].task == TRANSFER_PULL_TASK

    def _kwargs(self, step: ChainStep) -> dict[str, Any]:
        """``input_ready`` of a fallback chain says why (only new workers get one:
        the target of a fallback is the worker that tried to pull)."""
        if self.fallback and step.task == INPUT_READY_TASK:
            return {"fallback": self.fallback}
        return {}

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
            TRANSFER_PULL_TASK: "pull",
        }
        ready_args = (run_id, block.index, epoch, self.ref, task_id)
        ends = (INPUT_READY_TASK, TRANSFER_PULL_TASK)
        steps = [
            app.signature(
                step.task,
                args=ready_args if step.task in ends else (self.ref,),
                kwargs=self._kwargs(step),
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


def transfer_record(
    ref: dict[str, Any], block: Block, worker: str, kind: str, at: float, **extra: Any
) -> str:
    """One line of a run's transfer log (status, timeline); ``at``: Redis' time. ``kind``
    is how the value moved: ``peer`` (pulled from the worker holding it), ``s3``,
    ``direct`` (inline in the message, Soma's word) or ``cached``; ``extra`` adds what
    explains it (``fallback``: why a direct pull gave way to S3; ``seconds``: how long)."""
    return json.dumps(
        {
            "from_node": ref["node_id"],
            "to_node": block.task_node_ids()[0],
            "from_worker": ref.get("worker_id"),
            "to_worker": worker,
            "transfer_type": kind,
            "bytes": ref.get("size", 0),
            "at": at,
            **extra,
        }
    )
