"""Pure placement of Soma execution plans onto workers: no I/O, no Celery.

``schedule(plan, workers, differentiable_nodes)`` turns an
:class:`ExecutionPlan` and the live :class:`WorkerInfo` list into a
:class:`DistributionPlan`; ``schedule_study`` places study trials.
"""

from scheduler.distribution import (
    PARALLEL,
    SEQUENTIAL,
    Assignment,
    DataTransfer,
    DistributionPlan,
    Phase,
    PlanPhase,
)
from scheduler.errors import FieldProblem, PlacementError, PlanValidationError, SchedulerError
from scheduler.placement import data_edges, exit_nodes, schedule, schedule_study
from scheduler.plan import (
    Branch,
    Composite,
    Empty,
    Execute,
    ExecutionPlan,
    Loop,
    LoopCondition,
    Parallel,
    PlanNode,
    Remote,
    RemoteTarget,
    Sequence,
    Step,
    Stream,
    load_plan,
)
from scheduler.workers import WorkerInfo, load_workers

__all__ = [
    "PARALLEL",
    "SEQUENTIAL",
    "Assignment",
    "Branch",
    "Composite",
    "DataTransfer",
    "DistributionPlan",
    "Empty",
    "Execute",
    "ExecutionPlan",
    "FieldProblem",
    "Loop",
    "LoopCondition",
    "Parallel",
    "Phase",
    "PlacementError",
    "PlanNode",
    "PlanPhase",
    "PlanValidationError",
    "Remote",
    "RemoteTarget",
    "SchedulerError",
    "Sequence",
    "Step",
    "Stream",
    "WorkerInfo",
    "data_edges",
    "exit_nodes",
    "load_plan",
    "load_workers",
    "schedule",
    "schedule_study",
]
