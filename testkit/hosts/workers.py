"""A ``somatize-tasks worker`` on a host: its own id, directories, ``/dev/shm`` and link."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from somatize_tasks.config.settings import Settings
from testkit.hosts.host import Host
from testkit.workers import REPO, TEST_NODES, WorkerProcess, celery_args_for, worker_argv

#: A host worker's RAM tier, inside the host's private ``/dev/shm``.
HOST_RAM_DIR = Path("/dev/shm/somatize")


@dataclass
class HostWorker(WorkerProcess):
    """A worker process running on ``host``."""

    host: str = ""


def host_settings(base: Settings, host: Host, worker_id: str) -> Settings:
    """``base`` with the host's own directories and the worker's id."""
    return base.model_copy(
        update={
            "worker_id": worker_id,
            "cache_dir": host.cache_dir,
            "store_dir": host.store_dir,
            "ram_dir": HOST_RAM_DIR,
        }
    )


def clean_environment(settings: Settings) -> dict[str, str]:
    """This process's environment without its ``SOMATIZE_*``, then ``settings``' own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOMATIZE_")}
    env.update(settings.to_env())
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def start_host_worker(
    host: Host,
    settings: Settings,
    log_dir: Path,
    *,
    tags: str = "",
    nodes: str = TEST_NODES,
    concurrency: int = 2,
    options: tuple[str, ...] = (),
    celery_args: tuple[str, ...] = (),
) -> HostWorker:
    """Start the worker ``settings.worker_id`` on ``host`` (not waiting for its heartbeat)."""
    env = clean_environment(settings)  # SOMATIZE_WORKER_ID too: nodes may read it
    command = worker_argv(settings.worker_id, nodes=nodes, tags=tags, options=options)
    command += celery_args_for(concurrency, celery_args)
    log_path = log_dir / f"{settings.worker_id}.log"
    proc = host.popen(command, log_path=log_path, env=env, cwd=REPO)
    return HostWorker(settings.worker_id, proc, log_path, settings, host=host.name)


def stop_workers(workers: Sequence[WorkerProcess], grace_s: float) -> None:
    """SIGTERM every worker at once, SIGKILL whatever is left after ``grace_s`` (not one
    grace period per worker: a cluster stops in seconds)."""
    for worker in workers:
        worker.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for worker in workers:
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.proc.wait(max(0.0, deadline - time.monotonic()))
    for worker in workers:
        worker.signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.proc.wait(5)
