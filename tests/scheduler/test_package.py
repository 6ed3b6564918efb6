"""The package's surface: what it exports, and what importing it pulls in."""

from __future__ import annotations

import json
import subprocess
import sys

import scheduler

PUBLIC = {
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
    "SOMA_LOOP_CAP",
    "PlanDocument",
    "Predecessors",
    "check_predecessors",
    "load_plan_document",
    "plan_warnings",
}


def test_public_api_is_pinned() -> None:
    assert set(scheduler.__all__) == PUBLIC
    assert all(hasattr(scheduler, name) for name in PUBLIC)


def test_importing_scheduler_pulls_in_no_celery_redis_or_boto3() -> None:
    code = (
        "import json, sys, scheduler\n"
        "from scheduler import schedule, ExecutionPlan, WorkerInfo\n"
        "schedule(ExecutionPlan.model_validate({'Execute': {'node_id': 'a'}}),"
        " [WorkerInfo(id='w', name='w')])\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = json.loads(out.stdout)
    forbidden = ("celery", "kombu", "redis", "boto3", "botocore", "somatize_tasks")
    assert [m for m in loaded if m.split(".")[0] in forbidden] == []
