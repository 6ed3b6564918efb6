"""Small builders shared by the scheduler tests (plans, workers)."""

from __future__ import annotations

from typing import Any

from scheduler import ExecutionPlan, WorkerInfo


def ex(node_id: str) -> dict[str, Any]:
    return {"Execute": {"node_id": node_id}}


def plan(wire: Any) -> ExecutionPlan:
    return ExecutionPlan.model_validate(wire)


def worker(
    worker_id: str,
    *,
    tags: tuple[str, ...] = (),
    active: int = 0,
    slots: int = 4,
    gpu: bool = False,
    cores: int = 8,
) -> WorkerInfo:
    return WorkerInfo(
        id=worker_id,
        name=f"{worker_id}-name",
        tags=list(tags),
        gpu=gpu,
        cpu_cores=cores,
        active_jobs=active,
        max_concurrent=slots,
    )
