"""Stopping what a run that ended early still has queued or running.

A cancelled run, or one the reaper failed (its deadline passed), refuses
its queued messages anyway (``mark_running`` checks the run's status), but
a node already running would hold its worker's slot until it returns, or
for ever if it hangs. Revoking with ``terminate`` stops it now (one
broadcast control message for the whole run).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from celery import Celery


def unfinished_task_ids(statuses: Iterable[dict[str, Any]]) -> list[str]:
    """The task ids of nodes still pending or running (a batch's id once)."""
    return sorted(
        {
            s["task_id"]
            for s in statuses
            if s.get("state") in ("pending", "running") and s.get("task_id")
        }
    )


def revoke_unfinished(app: Celery, raw_statuses: Iterable[bytes]) -> int:
    """Revoke (and terminate) every unfinished node task of a run; how many."""
    task_ids = unfinished_task_ids(json.loads(raw) for raw in raw_statuses)
    if task_ids:
        app.control.revoke(task_ids, terminate=True, signal="SIGTERM")
    return len(task_ids)
