"""The Redis round trips of ``submit_plan``, folded: each function here is one trip
where the plain calls would take two or three.

A short run's time is mostly fixed costs, and each round trip is a few hundred
microseconds of the producer's time (more while the workers share its cores):
the placement lock, the live workers, their reservations, the key check, the
reservation and the unlock, the run's record and its first block's record used
to be ten trips before the first message went out; they are five now. What
each step guarantees is unchanged: the registry and reservations are read under
the placement lock, a key mismatch refuses the run before anything is recorded
(its reservation is forgotten), and the whole run is recorded, in one
transaction with its first block's dispatch record, before any message is
published.
"""

from __future__ import annotations

from typing import Any

from scheduler import DistributionPlan, WorkerInfo
from somatize_tasks.errors import MessageKeyError
from somatize_tasks.messaging.signing import refusing_workers
from somatize_tasks.runtime.compile.program import Program
from somatize_tasks.runtime.engine.context import RunContext
from somatize_tasks.workers.registry import Registry, json_fields
from somatize_tasks.workers.reservations import Reservations, reserve_run


def live_and_reserved(
    registry: Registry, reservations: Reservations
) -> tuple[list[WorkerInfo], Any]:
    """The live workers, and the reply to the reservations' read: one round trip."""
    pipe = registry.client.pipeline(transaction=False)
    registry.queue_read(pipe)
    reservations.queue_read(pipe)
    *live, reserved = pipe.execute(raise_on_error=False)
    for reply in live:
        if isinstance(reply, Exception):
            raise reply
    return registry.parse_read(live)[1], reserved


def reserve_checking_keys(context: RunContext, run_id: str, distribution: DistributionPlan) -> None:
    """Reserve the run's slots and refuse it if its workers would drop its messages (a
    key mismatch; its reservations are then forgotten), in one round trip."""
    workers = sorted({a.worker_id for a in distribution.assignments})
    keys = context.keys.workers_keys

    def read_keys(pipe: Any) -> None:
        if workers:
            pipe.hmget(keys, workers)

    raw = reserve_run(run_id, distribution, context.redis, read_keys)
    accepted = json_fields(workers, raw[0]) if workers else {}
    problem = refusing_workers(context.settings, accepted)
    if problem is not None:
        raise MessageKeyError(problem)


def dispatches_first(program: Program) -> bool:
    """Whether starting ``program`` dispatches one task block before it reads or writes
    anything that needs the run's record (the ``status`` a finish checks): its root is
    a chain of Sequences and Remotes down to a task block."""
    block = program.blocks[0]
    while not block.runs_task:
        if block.kind not in ("Sequence", "Remote") or not block.children:
            return False
        block = program.blocks[block.children[0]]
    return True
