"""Real ``somatize-tasks worker`` processes for tests and benchmarks, and waiting on them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from somatize_tasks.config.keys import QUEUE_PREFIX
from somatize_tasks.config.settings import Settings
from somatize_tasks.workers.registry import Registry
from testkit.services import wait_for

REPO = Path(__file__).resolve().parents[1]

TEST_NODES = ",".join(
    [
        "testkit.nodes.worker_nodes",
        "somatize_tasks.examples.nodes",
        "testkit.nodes.run_nodes",
        "testkit.nodes.soma_nodes",
        "testkit.nodes.fence_nodes",
        "testkit.nodes.cache_nodes",
        "testkit.nodes.study_nodes",
    ]
)


@dataclass
class WorkerProcess:
    """One ``somatize-tasks worker`` process group and its log."""

    worker_id: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    settings: Settings

    @property
    def queue(self) -> str:
        return f"{QUEUE_PREFIX}{self.worker_id}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM (warm shutdown), then SIGKILL the group if it lingers."""
        if self.proc.poll() is None:
            self.signal_group(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout_s)
        self.signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)


def wait_idle(settings: Settings, timeout_s: float = 10.0) -> None:
    """Until every live worker reports no node running: a run's ``wait`` returns
    while its last task is still ending, and a test whose assertions depend on
    where placement puts nodes must not see its workers still busy with the
    previous test's run (the heartbeat reports the slot free a moment later)."""
    registry = Registry.from_settings(settings)
    assert wait_for(lambda: all(w.info.active_jobs == 0 for w in registry.live()), timeout_s)


def celery_args_for(concurrency: int, extra: tuple[str, ...] = ()) -> list[str]:
    """The Celery arguments every test worker gets (a small pool, no mingle or gossip)."""
    return [
        "--concurrency",
        str(concurrency),
        "--loglevel",
        "info",
        "--without-mingle",
        "--without-gossip",
        *extra,
    ]


def worker_argv(
    worker_id: str, *, nodes: str = TEST_NODES, tags: str = "", options: tuple[str, ...] = ()
) -> list[str]:
    """``somatize-tasks worker`` run by this Python, before Celery's own arguments."""
    return [
        sys.executable,
        "-c",
        "from somatize_tasks.cli import main; main()",
        "worker",
        "--worker-id",
        worker_id,
        "--nodes",
        nodes,
        *(("--tags", tags) if tags else ()),
        *options,
    ]


def wait_live(worker: WorkerProcess, settings: Settings, timeout_s: float = 60.0) -> None:
    """Until ``worker`` heartbeats and its consumer is ready; its log in the error if not."""
    registry = Registry.from_settings(settings)

    def live() -> bool:
        if worker.proc.poll() is not None:
            raise RuntimeError(f"worker {worker.worker_id} exited:\n{worker.log()}")
        return any(seen.info.id == worker.worker_id for seen in registry.live())

    if not wait_for(live, timeout_s, 0.1):
        worker.stop()
        raise RuntimeError(f"worker {worker.worker_id} never heartbeat:\n{worker.log()}")
    # The heartbeat starts with the pool; wait for the consumer too.
    wait_for(lambda: " ready." in worker.log(), timeout_s, 0.1)


@dataclass
class WorkerFactory:
    """Starts worker processes for a test session; :meth:`close` kills them all."""

    settings: Settings
    log_dir: Path
    started: list[WorkerProcess] = field(default_factory=list)

    def start(
        self,
        name: str,
        *,
        tags: str = "",
        nodes: str = TEST_NODES,
        concurrency: int = 2,
        options: tuple[str, ...] = (),
        celery_args: tuple[str, ...] = (),
        wait: bool = True,
        plain: bool = False,
        source: Path = REPO,
        extra_env: Mapping[str, str] | None = None,
        log_name: str | None = None,
    ) -> WorkerProcess:
        """Start ``somatize-tasks worker`` (``options`` are its own, then celery's args).

        With ``plain``, start ``celery -A somatize_tasks worker`` configured by
        ``SOMATIZE_*`` variables alone. ``source``: the source tree the worker
        imports (another checkout of the project, to test that versions interoperate).
        ``extra_env``: more variables (say a clock shim's, :mod:`testkit.skew`);
        ``log_name``: the log file's name, for two processes under one worker id.
        """
        worker_id = f"{self.settings.key_prefix}-{name}"
        log_path = self.log_dir / f"{log_name or worker_id}.log"
        env = {**os.environ, **self.settings.to_env(), **(extra_env or {})}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source), env.get("PYTHONPATH")]))
        celery_tail = celery_args_for(concurrency, celery_args)
        if plain:
            # Plain `celery -A somatize_tasks worker`: everything from the environment.
            env.update(
                SOMATIZE_WORKER_ID=worker_id, SOMATIZE_WORKER_TAGS=tags, SOMATIZE_NODES=nodes
            )
            command = [sys.executable, "-m", "celery", "-A", "somatize_tasks", "worker"]
            command += celery_tail
        else:
            env.pop("SOMATIZE_WORKER_ID", None)
            command = worker_argv(worker_id, nodes=nodes, tags=tags, options=options)
            command += celery_tail
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                command,
                cwd=source,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = WorkerProcess(worker_id, proc, log_path, self.settings)
        self.started.append(worker)
        if wait:
            self.wait_live(worker)
        return worker

    def wait_live(self, worker: WorkerProcess, timeout_s: float = 60.0) -> None:
        wait_live(worker, self.settings, timeout_s)

    def close(self) -> None:
        for worker in self.started:
            worker.stop(timeout_s=5.0)
