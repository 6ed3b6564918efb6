"""Placement: work in progress."""
from __future__ import annotations
from collections.abc import Iterable
from scheduler.distribution import DistributionPlan
from scheduler.plan import ExecutionPlan
from scheduler.workers import WorkerInfo


def schedule(plan: ExecutionPlan, workers: list[WorkerInfo], differentiable_nodes: Iterable[str] = (), *, allow_local_fallback: bool = False) -> DistributionPlan:
    raise NotImplementedError


def schedule_study(plan: ExecutionPlan, workers: list[WorkerInfo], trials: int, differentiable_nodes: Iterable[str] = ()) -> DistributionPlan:
    raise NotImplementedError
