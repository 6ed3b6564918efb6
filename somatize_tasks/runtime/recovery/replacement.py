"""Moving a dead worker's nodes to live workers: the reaper's re-placement.

Every node the dead worker held moves to a live worker that satisfies its
``Remote`` target, chosen by :func:`scheduler.schedule` itself (a one-node
plan with the node's target), so re-placement follows the same filters and
scores as placement. A dead worker's nodes with one target move together
(keeping placement rule 1). The new distribution is stored and its version
bumped, so every process reloads it.
"""

from __future__ import annotations

from scheduler import (
    DistributionPlan,
    Execute,
    ExecutionPlan,
    PlacementError,
    PlanNode,
    Remote,
    RemoteTarget,
    WorkerInfo,
    schedule,
)
from somatize_tasks.errors import StrandedError
from somatize_tasks.runtime.compile.program import Program
from somatize_tasks.runtime.engine.context import RunContext
from somatize_tasks.runtime.state.packing import unpack


def replace_dead(
    context: RunContext, run_id: str, dead: set[str], live: dict[str, WorkerInfo]
) -> Program:
    """Move every node of the ``dead`` workers to live ones; store the new distribution.

    Returns the program compiled from it.
    """
    program = context.program(run_id, refresh=True)
    if program is None:
        raise StrandedError(f"run {run_id} is no longer known to Redis")
    state = context.state(run_id)
    raw = context.redis.hget(state.meta, "distribution")
    distribution = DistributionPlan.model_validate_json(unpack(raw or b"{}"))
    chosen: dict[tuple[str, str], tuple[str, str]] = {}
    for assignment in distribution.assignments:
        if assignment.worker_id not in dead:
            continue
        block = program.block_of(assignment.node_id)
        target = program.target_of(block) if block is not None else None
        key = (assignment.worker_id, target.model_dump_json() if target else "")
        if key not in chosen:
            chosen[key] = new_home(assignment.node_id, assignment.worker_id, target, live)
        assignment.worker_id, assignment.worker_name = chosen[key]
        assignment.reason = f"re-placed: its worker died ({assignment.reason})"
    state.replace_distribution(distribution.model_dump_json())
    refreshed = context.program(run_id, refresh=True)
    assert refreshed is not None
    return refreshed


def new_home(
    node_id: str, old: str, target: RemoteTarget | None, live: dict[str, WorkerInfo]
) -> tuple[str, str]:
    """Where the scheduler would put this node now: ``(worker id, name)``."""
    probe: PlanNode = Execute(node_id=node_id)
    if target is not None:
        probe = Remote(node_id=node_id, target=target, plan=probe)
    plan = ExecutionPlan.of(probe)
    try:
        placed = schedule(plan, list(live.values()))
        if not placed.assignments and live:
            # Every live worker is busy: the node queues on one rather than waiting for a
            # free slot the run may never see (placement's "queued runs" rule).
            placed = schedule(
                plan, [w.model_copy(update={"active_jobs": 0}) for w in live.values()]
            )
    except PlacementError as exc:
        raise StrandedError(
            f"node '{node_id}' was on worker '{old}', which died, and needs "
            f"{target.describe() if target else 'a worker'}: no live worker can take it ({exc})"
        ) from None
    if not placed.assignments:
        raise StrandedError(
            f"node '{node_id}' was on worker '{old}', which died: no live worker left"
        )
    return placed.assignments[0].worker_id, placed.assignments[0].worker_name
