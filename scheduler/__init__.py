"""Pure placement of Soma execution plans onto workers: no I/O, no Celery.

``schedule(plan, workers, differentiable_nodes)`` turns an
:class:`ExecutionPlan` and the live :class:`WorkerInfo` list into a
:class:`DistributionPlan`; ``schedule_study`` places study trials.
"""

from scheduler.errors import FieldProblem, PlacementError, PlanValidationError, SchedulerError
from scheduler.model.distribution import (
    PARALLEL,
    SEQUENTIAL,
    Assignment,
    DataTransfer,
    DistributionPlan,
    Phase,
    PlanPhase,
)
from scheduler.model.graph import PlanDocument, Predecessors, check_predecessors, load_plan_document
from scheduler.model.plan import (
    SOMA_LOOP_CAP,
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
    plan_warnings,
)
from scheduler.model.workers import WorkerInfo, load_workers
from scheduler.placement.schedule import data_edges, exit_nodes, schedule, schedule_study

__all__ = [
    "PARALLEL",
    "SEQUENTIAL",
    "SOMA_LOOP_CAP",
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
    "PlanDocument",
    "PlanNode",
    "PlanPhase",
    "PlanValidationError",
    "Predecessors",
    "Remote",
    "RemoteTarget",
    "SchedulerError",
    "Sequence",
    "Step",
    "Stream",
    "WorkerInfo",
    "check_predecessors",
    "data_edges",
    "exit_nodes",
    "load_plan",
    "load_plan_document",
    "load_workers",
    "plan_warnings",
    "schedule",
    "schedule_study",
]
