"""A cluster that outlives its starter: ``cluster up`` saves it, ``cluster down`` stops it.

The state file records every process by pid and start time (so a reused pid is
never signalled) and the environment producers need; it holds the cluster's
message key, so it is readable by its owner only.
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from somatize_tasks.errors import ClusterError
from somatize_tasks.local_cluster.cluster import (
    REDIS_STOP_GRACE_S,
    WORKER_STOP_GRACE_S,
    LocalCluster,
    StartedProcess,
    remove_ram_dir,
    stop_all,
)
from somatize_tasks.local_cluster.processes import ProcessRef, signals_deferred

STATE_FILE = "cluster.json"


def save_state(cluster: LocalCluster) -> Path:
    """Record what ``cluster down`` needs: every process (pid and start time), the env."""
    state = {
        "root": str(cluster.root),
        "env": cluster.env(),
        "workers": [{"id": s.worker_id, "tags": list(s.tags)} for s in cluster.specs],
        "processes": [
            {
                "role": p.role,
                "pid": p.ref.pid,
                "start_ticks": p.ref.start_ticks,
                "log": str(p.log_path),
            }
            for p in cluster.processes
        ],
        "started_at": time.time(),
    }
    path = cluster.root / STATE_FILE
    tmp = path.with_suffix(".tmp")
    tmp.touch(mode=0o600)  # it holds the message key
    tmp.chmod(0o600)
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(path)
    return path


@dataclass
class SavedCluster:
    """A background cluster as its state file describes it."""

    root: Path
    env: dict[str, str]
    workers: list[dict[str, Any]]
    processes: list[StartedProcess]

    @classmethod
    def load(cls, root: Path) -> SavedCluster | None:
        """The cluster recorded under ``root``, or None if there is none."""
        try:
            state = json.loads((root / STATE_FILE).read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ClusterError(f"cannot read {root / STATE_FILE}: {exc}") from None
        processes = [
            StartedProcess(
                p["role"], ProcessRef(int(p["pid"]), p.get("start_ticks")), Path(p["log"])
            )
            for p in state.get("processes", [])
        ]
        return cls(root, dict(state.get("env", {})), list(state.get("workers", [])), processes)

    def alive(self) -> list[StartedProcess]:
        return [p for p in self.processes if p.ref.alive()]

    def stop(self) -> int:
        """Stop everything it recorded (workers, then Redis); how many were still running."""
        running = len(self.alive())
        with signals_deferred(signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            stop_all([p for p in self.processes if p.role != "redis"], WORKER_STOP_GRACE_S)
            stop_all([p for p in self.processes if p.role == "redis"], REDIS_STOP_GRACE_S)
            remove_ram_dir(self.env)
        return running
