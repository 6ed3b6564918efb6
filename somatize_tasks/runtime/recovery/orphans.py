"""Nodes orphaned on a live worker: no message behind them any more.

A node can be ``running`` or ``pending`` on a worker that is alive and
well, and yet nothing will ever run it: a Redis outage made its task fail
and be acknowledged, the worker was restarted under the same id before its
heartbeat expired (the old process's messages sit unacknowledged until the
visibility timeout, an hour), or its message was lost. Its worker's
heartbeat is fresh, so the dead-worker rule never fires.

The rule (no Redis call for a run without suspects; one ``HMGET`` per sweep
for the workers of all suspects, however many runs they belong to):

- Every heartbeat reports the node task ids its worker holds (reserved,
  waiting for an ETA, or running; ``<p>:workers:tasks``, see
  :mod:`somatize_tasks.workers.heartbeat`).
- A node is a *suspect* when it is ``running`` (or ``pending`` with its
  message published: not waiting for a recomputation) on a live worker, for
  at least one heartbeat TTL, and its task id is not in that worker's
  report. A pending suspect whose message may still be in the worker's
  queue (the queue holds it, or is too long to look through:
  :data:`QUEUE_SCAN_MAX`) is not one: the worker is busy, not orphaning it.
- A node waiting for its transfers is judged by its chains' steps instead
  (``chain`` in its status, :mod:`~somatize_tasks.runtime.engine.transfer_chains`):
  a suspect when no step is in its worker's report or queue (a step's
  message can vanish when Redis dies just as a consumer pops it).
- A suspect seen again at least one heartbeat TTL after it was first
  noticed is *orphaned* (the worker has reported since, so the report is
  not merely late). Notes are kept in the watcher's memory: a new watcher
  takes one more TTL to decide, and nothing is written to Redis.

An orphan is re-dispatched under a new task id; if the old message turns
up after all, ``mark_running`` refuses it (task id mismatch). A worker
that sends no report (an older version, more than
:data:`~somatize_tasks.workers.heartbeat.MAX_REPORTED_TASKS` tasks held) is never
judged.
"""

from __future__ import annotations

import time
from typing import Any

from redis import Redis

from somatize_tasks.config.clock import redis_now
from somatize_tasks.config.keys import queue_name
from somatize_tasks.workers.registry import Registry

#: A pending suspect's queue is searched for its message only when it holds at
#: most this many messages; a longer queue may hold it (not judged this sweep).
QUEUE_SCAN_MAX = 2000


class OrphanWatch:
    """One watcher's notes on suspects, across sweeps (see the module docstring)."""

    def __init__(self, registry: Registry, client: Redis[bytes], ttl_s: float) -> None:
        self.registry = registry
        self.client = client
        self.ttl_s = ttl_s
        # (run id, node id, task id) -> when first seen missing (monotonic).
        self._noticed: dict[tuple[str, str, str], float] = {}
        # Worker reports read this sweep (one read per worker per sweep).
        self._reports: dict[str, frozenset[str] | None] = {}

    def new_sweep(self) -> None:
        """Reports read before are stale now: read them again when needed."""
        self._reports = {}

    def forget_runs_except(self, run_ids: set[str]) -> None:
        """Drop notes of runs no longer active (bounded memory)."""
        self._noticed = {k: t for k, t in self._noticed.items() if k[0] in run_ids}

    def orphaned(self, run_id: str, nodes: dict[str, dict[str, Any]], live: set[str]) -> list[str]:
        """The run's nodes orphaned on live workers (usually none, at no Redis cost)."""
        suspects = self._candidates(nodes, live, redis_now(self.client))  # stamps: Redis'
        noticed_before = {k: t for k, t in self._noticed.items() if k[0] == run_id}
        for key in noticed_before:
            self._noticed.pop(key)
        if not suspects:
            return []
        held = self._held({worker for s in suspects.values() for worker, _ in _watched(s)})
        now = time.monotonic()
        found = []
        for node_id, status in suspects.items():
            if not self._missing(status, held):
                continue
            key = (run_id, node_id, status["task_id"])
            first = noticed_before.get(key, now)
            self._noticed[key] = first
            if now - first >= self.ttl_s:
                found.append(node_id)
        return found

    def _held(self, workers: set[str]) -> dict[str, frozenset[str] | None]:
        missing = workers - set(self._reports)
        if missing:
            self._reports.update(self.registry.held_tasks(missing))
        return self._reports

    def _candidates(
        self, nodes: dict[str, dict[str, Any]], live: set[str], now: float
    ) -> dict[str, dict[str, Any]]:
        """Nodes that could be orphans, judged from their status alone."""
        young = now - self.ttl_s
        found = {}
        for node_id, status in nodes.items():
            if status.get("worker") not in live or not status.get("task_id"):
                continue
            state = status.get("state")
            running = state == "running" and status.get("started_at", now) < young
            waiting = status.get("waiting_for")
            judged = not waiting or (waiting == "transfers" and bool(status.get("chain")))
            queued = state == "pending" and judged and status.get("queued_at", now) < young
            if running or queued:
                found[node_id] = status
        return found

    def _missing(self, status: dict[str, Any], held: dict[str, frozenset[str] | None]) -> bool:
        """No task behind the node: none of its tasks (the node's own, or its transfer
        chains' steps) is in its worker's report, nor (if pending) in its queue. A
        worker that sent no report is never judged."""
        watched = _watched(status)
        if any(held.get(worker) is None for worker, _ in watched):
            return False
        if any(task_id in (held.get(worker) or ()) for worker, task_id in watched):
            return False
        if status["state"] == "running":
            return True
        return not any(self._queued(worker, task_id) for worker, task_id in watched)

    def _queued(self, worker_id: str, task_id: str) -> bool:
        """Whether the worker's queue may still hold the task's message."""
        queue = queue_name(worker_id)
        length = self.client.llen(queue)
        if length == 0:
            return False
        if length > QUEUE_SCAN_MAX:
            return True
        needle = task_id.encode()
        return any(needle in message for message in self.client.lrange(queue, 0, -1))


def _watched(status: dict[str, Any]) -> list[tuple[str, str]]:
    """``(worker, task id)`` of the tasks behind a node: its transfer chains' steps
    while it waits for them, else its own task."""
    if status.get("waiting_for") == "transfers":
        return [(str(worker), str(task_id)) for worker, task_id in status.get("chain", ())]
    return [(str(status["worker"]), str(status["task_id"]))]
