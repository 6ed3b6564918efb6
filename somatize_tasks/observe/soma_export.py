"""A cluster run written as Soma's own run directory, so Soma's readers and plots open it.

Soma (``soma-runtime/src/tracking``) keeps each run in ``<root>/runs/<run id>/``:

- ``manifest.json``: what ran (``RunManifest``: schema version 1, id, kind,
  name, creation time, host, argv, graph summary, ...);
- ``status.json``: ``{"state": "running" | "completed" | "failed",
  "updated_at", "heartbeat_at", "finished_at"}``;
- ``events.jsonl``: one ``EventEnvelope`` a line, ``{"seq", "ts",
  "event_type", ...fields}``, serde's internally tagged ``Event`` with
  durations in milliseconds and times in RFC 3339 UTC;
- ``metrics.jsonl``: metric lines (none here: the cluster records no metrics).

This module writes the same layout from a run's state and history in Redis.
What a cluster run has and Soma's schema has not is said in words where the
schema has room (``output_summary``, the manifest's ``notes``), never in
fields of our own: a cancelled run is ``failed`` with a ``RunFailed`` saying
so, and a node whose worker died is a ``NodeFailed`` followed by its next
attempt. A node's ``kind`` is ``Opaque``: the producer cannot see the catalog.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from somatize_tasks.runtime.producer.handle import RunStatus
from somatize_tasks.runtime.state.history import LOST, Attempt, attempts

SCHEMA_VERSION = 1
SOMA_STATES = {"running": "running", "done": "completed", "failed": "failed", "cancelled": "failed"}


def rfc3339(t: float) -> str:
    """Seconds since the epoch as serde's ``DateTime<Utc>``: ``2026-07-28T08:37:37.179459Z``."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))


def _parallel_branches(plan: Any) -> int:
    """The widest Parallel in the plan (1 when there is none): Soma's ``parallel_branches``."""
    if isinstance(plan, dict):
        widest = len(plan["Parallel"]) if isinstance(plan.get("Parallel"), list) else 1
        return max([widest, *(_parallel_branches(v) for v in plan.values())])
    if isinstance(plan, list):
        return max([1, *(_parallel_branches(v) for v in plan)])
    return 1


def _fallback_attempts(status: RunStatus) -> list[Attempt]:
    """A run without history: each node's latest record is its one attempt."""
    return [
        Attempt(
            node_id,
            node.worker or "?",
            0,
            node.started_at,
            node.ended_at,
            node.state if node.state in ("done", "failed") else "running",
            node.error,
        )
        for node_id, node in status.nodes.items()
        if node.started_at is not None
    ]


def events(
    status: RunStatus, history: list[dict[str, Any]], plan: Any
) -> list[tuple[float, dict[str, Any]]]:
    """The run as Soma events, each with its time, in time order."""
    run_id = status.run_id
    created = status.created_at or 0.0
    out: list[tuple[float, dict[str, Any]]] = [
        (
            created,
            {
                "event_type": "RunStarted",
                "run_id": run_id,
                "plan_summary": {
                    "total_nodes": len(status.nodes),
                    "cached_nodes": 0,
                    "parallel_branches": _parallel_branches(plan),
                },
            },
        )
    ]
    tries = attempts(history) if history else _fallback_attempts(status)
    for attempt in tries:
        node = {"run_id": run_id, "node_id": attempt.node_id}
        out.append(
            (
                attempt.start,
                {"event_type": "NodeStarted", **node, "kind": "Opaque", "effectful": False},
            )
        )
        if attempt.end is None:
            continue
        where = f"on worker {attempt.worker}" + (
            f", loop pass {attempt.epoch}" if attempt.epoch else ""
        )
        if attempt.state in ("done", "cached"):
            how = "served from the content cache" if attempt.state == "cached" else "done"
            out.append(
                (
                    attempt.end,
                    {
                        "event_type": "NodeCompleted",
                        **node,
                        "duration": _ms(attempt.end - attempt.start),
                        "output_summary": f"{how} {where}",
                    },
                )
            )
        else:
            error = (
                f"worker {attempt.worker} died; the node ran again elsewhere"
                if attempt.state == LOST
                else attempt.error or "failed"
            )
            out.append((attempt.end, {"event_type": "NodeFailed", **node, "error": error}))
    end = status.finished_at
    if end is not None:  # the run's end comes last, even if a worker's clock ran ahead
        end = max([end, *(at for at, _ in out)])
    if end is not None and status.state == "done":
        out.append(
            (end, {"event_type": "RunCompleted", "run_id": run_id, "duration": _ms(end - created)})
        )
    elif end is not None:
        out.append(
            (end, {"event_type": "RunFailed", "run_id": run_id, "error": _run_error(status)})
        )
    return sorted(out, key=lambda pair: pair[0])


def _run_error(status: RunStatus) -> str:
    if status.state == "cancelled":
        return "cancelled"
    error = status.error or {}
    return (
        f"node '{error.get('node_id')}' on worker '{error.get('worker_id')}' raised "
        f"{error.get('type')}: {error.get('message')}"
    )


def manifest(status: RunStatus, plan: Any, params: Any) -> dict[str, Any]:
    workers = sorted({n.worker for n in status.nodes.values() if n.worker})
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": status.run_id,
        "kind": "other",
        "name": f"somatize-tasks run {status.run_id}",
        "created_at": rfc3339(status.created_at or 0.0),
        "soma_version": None,
        "python_version": platform.python_version(),
        "hostname": socket.gethostname(),
        "git": {"sha": None, "branch": None, "dirty": None},
        "entrypoint": sys.argv[0] if sys.argv else None,
        "argv": list(sys.argv),
        "cwd": os.getcwd(),
        "seeds": {},
        "params": params if isinstance(params, dict) else {},
        "hypothesis": None,
        "tags": ["somatize-tasks"],
        "notes": f"exported from somatize-tasks; ran on worker(s) {', '.join(workers) or '-'}",
        "parent_run_id": None,
        "graph": {
            "n_nodes": len(status.nodes),
            "node_ids": list(status.nodes),
            "graph_path": None,
            "mermaid_path": None,
        },
        "study_path": None,
    }


def soma_status(status: RunStatus, now: float) -> dict[str, Any]:
    updated = status.finished_at or now
    return {
        "state": SOMA_STATES.get(status.state, "running"),
        "updated_at": rfc3339(updated),
        "heartbeat_at": rfc3339(updated),
        "finished_at": rfc3339(status.finished_at) if status.finished_at else None,
    }


def write_run_dir(
    root: Path,
    status: RunStatus,
    history: list[dict[str, Any]],
    plan: Any,
    params: Any,
    now: float,
) -> Path:
    """Write ``<root>/runs/<run id>/`` (replacing its files); returns the directory."""
    run_dir = root / "runs" / status.run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"seq": seq, "ts": rfc3339(at), **event}, separators=(",", ":"))
        for seq, (at, event) in enumerate(events(status, history, plan))
    ]
    _atomic(run_dir / "events.jsonl", "".join(f"{line}\n" for line in lines))
    _atomic(run_dir / "metrics.jsonl", "")
    _atomic(run_dir / "manifest.json", json.dumps(manifest(status, plan, params), indent=2))
    _atomic(run_dir / "status.json", json.dumps(soma_status(status, now), indent=2))
    return run_dir


def _atomic(path: Path, text: str) -> None:
    """Soma writes its JSON files atomically; so do we (write aside, then rename)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)
