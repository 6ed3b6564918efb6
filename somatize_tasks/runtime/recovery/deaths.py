"""A limit on damage: a node that keeps killing its worker fails its run.

Without a limit, a node that crashes the process running it (a segfault,
an out-of-memory kill, ``os.kill(os.getpid(), SIGKILL)``) is re-run on the
next worker, and the next, and takes them all down in turn. Dask stops
after three (``KilledWorker``); so does this, by default
(``SOMATIZE_MAX_NODE_DEATHS``, or ``submit_plan(max_node_deaths=...)``).

What counts as one death of a block (its nodes die together):

- its worker's heartbeat expired while the block was ``running`` there
  (the whole worker died: the reaper's dead-worker rule);
- the block was ``running`` on a live worker that no longer holds its task
  (the worker was restarted under the same id: the orphan rule);
- its message runs again while the run's own record says the block is still
  ``running`` under that very task id (``mark_running`` hands back that earlier
  status): Celery's prefork pool lost the child process running it
  (``WorkerLostError``) and, with ``task_reject_on_worker_lost``, put the
  message back on the queue. The main process lives on, so only this start
  shows the death. The broker's ``redelivered`` flag is never read: anyone
  who can write to the broker can set it, and a replayed copy of a message
  is refused before it starts (:mod:`somatize_tasks.messaging.replay`).

Each death is one attempt (task id and start time), recorded once in the
run's working state (``k:<block>`` in ``results``: attempt -> worker), so
two watchers, or a watcher and a redelivery, never count one death twice.
When a block's count reaches the limit the run fails with
``KilledWorker``, naming its nodes and the workers it took down, and the
block is not run again. An attempt that ran for its hard time limit was
stopped by the pool, not killed by its node: that run fails with
``NodeTimeLimitExceeded`` at once instead.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from somatize_tasks.config.clock import redis_now
from somatize_tasks.lua import script
from somatize_tasks.runtime.compile.blocks import Block
from somatize_tasks.runtime.compile.program import Program
from somatize_tasks.runtime.recovery.reaper_checks import Failure, overdue
from somatize_tasks.runtime.state.redis_state import RedisRunState

log = logging.getLogger(__name__)


def record_deaths(state: RedisRunState, attempts: list[dict[str, Any]]) -> dict[int, list[str]]:
    """Count these dead attempts (``running`` node statuses) in, once each; every
    block's deaths so far, as the list of the workers that died running it."""
    if not attempts:
        return {}
    args: list[Any] = [state.ttl_s]
    for status in attempts:
        attempt = f"{status.get('task_id')}@{status.get('started_at')}"
        args += [status["block"], attempt, status.get("worker") or "?"]
    replies = script(state.client, "record_deaths")(keys=[state.results], args=args)
    found: dict[int, list[str]] = {}
    for status, raw in zip(attempts, replies, strict=True):
        found[int(status["block"])] = sorted(json.loads(raw).values())
    return found


def max_deaths(state: RedisRunState, default: int) -> int:
    """The run's limit (``submit_plan(max_node_deaths=...)``), else the setting."""
    raw = state.client.hget(state.meta, "max_node_deaths")
    return int(raw) if raw else default


def killed_worker(run_id: str, nodes: list[str], workers: list[str], limit: int) -> Failure:
    """The run's error once a block has killed ``limit`` workers (or worker processes)."""
    shown = "+".join(nodes)
    return Failure(
        nodes[0] if nodes else None,
        ",".join(dict.fromkeys(workers)),
        f"node '{shown}' of run {run_id} was running when its worker died {len(workers)} "
        f"times (workers {', '.join(workers)}); it is not run again "
        f"(SOMATIZE_MAX_NODE_DEATHS={limit}: a node that crashes its process would take "
        "every worker down in turn)",
        "KilledWorker",
    )


def fail_for_deaths(
    state: RedisRunState, failure: Failure, nodes: list[str], status: dict[str, Any]
) -> bool:
    """End the run with ``failure``; its nodes show as failed, not running for ever
    (marked first: whoever sees the run failed sees them failed too)."""
    if not state.is_active():
        return False
    state.mark_nodes(
        nodes,
        "failed",
        status.get("worker") or "?",
        int(status.get("epoch", 0)),
        error=failure.message,
    )
    return state.finish("failed", error=failure.detail())


def stopped_by_time_limit(
    state: RedisRunState,
    node_id: str,
    status: dict[str, Any],
    block_nodes: int,
    hard_s: float | None,
) -> Failure | None:
    """A dead attempt that ran for (90 % of) its hard time limit was stopped by it,
    not killed by its node: the run's time limit error, else None. (The pool counts
    the limit from before ``mark_running``; a fused chain gets it once per node.)
    The start was stamped on Redis' clock, and is judged on it (config.clock)."""
    if hard_s is None:
        return None
    limit_s = hard_s * block_nodes
    return overdue(limit_s, {node_id: status}, redis_now(state.client), -0.1 * limit_s)


def restart_is_death(
    state: RedisRunState, program: Program, block: Block, previous: str, default_limit: int
) -> Failure | None:
    """A block's task started again while its earlier start (``previous``, the status
    ``mark_running`` replaced) was still ``running``: that execution died. Count the
    death; the run's error when the block reached its limit, else None (run it again).

    A process killed by the block's hard time limit is no death: the run fails
    with ``NodeTimeLimitExceeded`` at once (:func:`stopped_by_time_limit`).
    """
    nodes = block.task_node_ids()
    status = json.loads(previous)
    killed = stopped_by_time_limit(state, nodes[0], status, len(nodes), program.time_limits_s[1])
    if killed is not None:
        return killed
    deaths = record_deaths(state, [status])[int(status["block"])]
    limit = max_deaths(state, default_limit)
    log.warning(
        "run %s: node %s lost its worker process (death %d of %d allowed)",
        state.run_id,
        "+".join(nodes),
        len(deaths),
        limit,
    )
    if len(deaths) < limit:
        return None
    return killed_worker(state.run_id, nodes, deaths, limit)
