"""The fault matrix's cluster: its own redis-server, moto's S3 server, three workers.

Everything runs on 127.0.0.1 under one temp directory, each process in its
own process group tied to this one (``PR_SET_PDEATHSIG``), so :meth:`close`
(or this process dying) takes all of it down. Never the shared Redis on
6379: the benchmark restarts its Redis, with and without an append-only file.

Workers are real ``python -m somatize_tasks worker`` processes configured by
``SOMATIZE_*`` variables, as on a lab machine, with the settings the fixes of
issue 13 read once they are merged (``SOMATIZE_MESSAGE_KEY``,
``SOMATIZE_MAX_NODE_DEATHS``): the harness turns them on, it never fakes them.
Processes are spawned from the main thread only: a child's parent-death
signal fires when the *thread* that forked it ends.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from redis import Redis

from somatize_tasks.config.keys import QUEUE_PREFIX
from somatize_tasks.config.settings import Settings
from somatize_tasks.local_cluster.cluster import ArgumentSettings, clean_environment
from somatize_tasks.local_cluster.processes import ProcessRef, spawn, stop_group, wait_until
from somatize_tasks.local_cluster.redis_server import answers, find_redis_server, free_port
from somatize_tasks.workers.registry import Registry
from testkit.nodes.faults_nodes import TRIP_ENV

REPO = Path(__file__).resolve().parents[2]
NODES = "testkit.nodes.faults_nodes"
BUCKET = "faults"
#: The shared secret of signed messages (issue 13); a forger does not have it.
MESSAGE_KEY = "fault-matrix-" + uuid.uuid4().hex
#: What the fixes of issue 13 read, once merged; unknown settings are ignored before.
FEATURES = {"SOMATIZE_MESSAGE_KEY": MESSAGE_KEY, "SOMATIZE_MAX_NODE_DEATHS": "3"}
#: Worker name -> tags. ``src``/``dst`` place the two ends of a transfer on two
#: different workers, and a third worker can take over the end a row kills (``src``
#: by default, ``dst`` in :data:`DST_SPARE`); ``small`` holds the tiny disk.
WORKER_TAGS = {"w1": "cpu,src", "w2": "cpu,dst", "w3": "cpu,src,small"}
DST_SPARE = {**WORKER_TAGS, "w3": "cpu,dst,small"}


@dataclass
class Proc:
    """One process group this cluster started."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    ref: ProcessRef = field(init=False)

    def __post_init__(self) -> None:
        self.ref = ProcessRef.of(self.popen.pid)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        self.ref.signal_group(sig)

    def stop(self, grace_s: float = 5.0) -> None:
        self.ref.signal_group(signal.SIGCONT)  # a stopped group cannot act on SIGTERM
        stop_group(self.ref, grace_s=grace_s, reap=self.popen.poll)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(1)

    def tail(self, chars: int = 2000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


class FaultCluster:
    """Redis (``aof``: append-only, fsync always), moto S3, workers w1..w3."""

    def __init__(
        self,
        *,
        aof: bool = False,
        tiny_disk_mb: int | None = None,
        tags: dict[str, str] | None = None,
        tiny_ram_mb: int | None = None,
    ) -> None:
        self.tags = dict(tags or WORKER_TAGS)
        #: With a RAM directory (a tmpfs this small): a shared directory store, one machine.
        self.tiny_ram_mb = tiny_ram_mb
        self.root = Path(tempfile.mkdtemp(prefix="faults-"))
        self.aof = aof
        self.prefix = f"fm{uuid.uuid4().hex[:6]}"
        self.redis_port = free_port()
        self.s3_port = free_port()
        self.redis: Proc | None = None
        self.moto: Proc | None = None
        self.workers: dict[str, Proc] = {}
        self.others: list[Proc] = []  # producer processes
        self.mounts: list[Path] = []
        self.tiny_disk_mb = tiny_disk_mb
        self.killed: set[int] = set()  # pids of workers the harness itself killed
        self.lost: set[int] = set()  # pids of workers that died without the harness killing them
        for sub in ("logs", "redis", "cache", "trip"):
            (self.root / sub).mkdir()

    # --- settings --------------------------------------------------------------------

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    @property
    def s3_url(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def settings(self, **overrides: Any) -> Settings:
        """The producer's settings (no ambient ``SOMATIZE_*``), with the issue-13 features."""
        fields: dict[str, Any] = {
            "redis_url": self.redis_url,
            "key_prefix": self.prefix,
            "store_kind": "s3",
            "s3_endpoint_url": self.s3_url,
            "s3_bucket": BUCKET,
            "s3_prefix": self.prefix,
            "s3_access_key_id": "testing",
            "s3_secret_access_key": "testing-secret",
            "s3_multipart_threshold_bytes": 5 * 1024 * 1024,
            "s3_multipart_chunk_bytes": 5 * 1024 * 1024,
            "s3_max_concurrency": 2,
            "store_dir": self.root / "store",
            "cache_dir": self.root / "cache",
            "inline_max_bytes": 128,
            "heartbeat_interval_s": 0.5,
            "reroute_grace_s": 5.0,
            "transfer_max_retries": 4,
            "transfer_retry_backoff_max_s": 2.0,
            "worker_id": f"{self.prefix}-producer",
            **self._ram_store(),
            **overrides,
        }
        for name, value in FEATURES.items():
            short = name.removeprefix("SOMATIZE_").lower()
            if short in Settings.model_fields:
                fields.setdefault(short, value)
        return ArgumentSettings.model_validate(fields)

    def _ram_store(self) -> dict[str, Any]:
        """With a tiny RAM directory: the shared directory store, and its RAM tier there
        with a budget the tmpfs, not the setting, runs out of."""
        if not self.tiny_ram_mb:
            return {}
        return {
            "store_kind": "local",
            "ram_dir": self.root / "ram",
            "ram_max_bytes": 1 << 30,
        }

    def env(self) -> dict[str, str]:
        """A child's environment: these settings as ``SOMATIZE_*``, the features, the repo."""
        env = self.settings().to_env()
        env.pop("SOMATIZE_WORKER_ID")
        env.update(FEATURES)
        env[TRIP_ENV] = str(self.root / "trip")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        return clean_environment(env)

    def worker_id(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    # --- starting --------------------------------------------------------------------

    def start(self) -> None:
        self.start_redis()
        self.start_moto()
        if self.tiny_disk_mb:
            self.mount_tiny_cache("w3", self.tiny_disk_mb)
        if self.tiny_ram_mb:
            self.mount_tmpfs(self.root / "ram", self.tiny_ram_mb)
        for name in self.tags:
            self.start_worker(name)
        self.wait_live(list(self.tags))

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> Proc:
        log = self.root / "logs" / f"{name}.log"
        popen = spawn(argv, env=env, log_path=log, tie_to_parent=True, cwd=REPO)
        return Proc(name, popen, log)

    def spawn_other(self, name: str, argv: list[str], env: dict[str, str]) -> Proc:
        """A process that is not a worker (a producer), stopped with the cluster."""
        proc = self._spawn(name, argv, env)
        self.others.append(proc)
        return proc

    def start_redis(self) -> None:
        binary = find_redis_server().path
        persistence = (
            ["--appendonly", "yes", "--appendfsync", "always"]
            if self.aof
            else ["--appendonly", "no"]
        )
        argv = [
            str(binary),
            "--port",
            str(self.redis_port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            *persistence,
            "--dir",
            str(self.root / "redis"),
            "--protected-mode",
            "yes",
            "--loglevel",
            "warning",
        ]
        self.redis = self._spawn("redis", argv, clean_environment({}))
        if not wait_until(lambda: answers(self.redis_url), 10):
            raise RuntimeError(f"redis-server did not start:\n{self.redis.tail()}")

    def restart_redis(self, down_s: float) -> float:
        """SIGKILL Redis, keep it down ``down_s``, start it again on the same port;
        the monotonic time it went down."""
        assert self.redis is not None
        self.redis.signal(signal.SIGKILL)
        at = time.monotonic()
        self.redis.popen.wait(5)
        time.sleep(down_s)
        self.start_redis()
        return at

    def start_moto(self) -> None:
        argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.s3_port)]
        self.moto = self._spawn("moto", argv, clean_environment({}))

        def up() -> bool:
            try:
                with urllib.request.urlopen(f"{self.s3_url}/moto-api/", timeout=0.5):
                    return True
            except OSError:
                return False

        if not wait_until(up, 30, 0.1):
            raise RuntimeError(f"moto did not start:\n{self.moto.tail()}")
        self.s3().create_bucket(Bucket=BUCKET)

    def s3(self) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.s3_url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing-secret",
        )

    def mount_tiny_cache(self, name: str, size_mb: int) -> None:
        """A ``size_mb`` tmpfs as ``name``'s cache (needs root and mount)."""
        self.mount_tmpfs(self.root / "cache" / self.worker_id(name), size_mb)

    def mount_tmpfs(self, target: Path, size_mb: int) -> None:
        """A ``size_mb`` tmpfs on ``target`` (needs root and mount), unmounted at close."""
        target.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(target)],
            check=True,
            capture_output=True,
        )
        self.mounts.append(target)

    def start_worker(self, name: str) -> Proc:
        proc = self._spawn(self.worker_id(name), self.worker_argv(name), self.env())
        self.workers[name] = proc
        return proc

    def worker_argv(self, name: str) -> list[str]:
        """The command line that starts worker ``name``."""
        worker_id = self.worker_id(name)
        return [
            sys.executable,
            "-m",
            "somatize_tasks",
            "worker",
            "--worker-id",
            worker_id,
            "--no-gpu",
            "--nodes",
            NODES,
            "--tags",
            self.tags[name],
            "--concurrency",
            "2",
            "--loglevel",
            "info",
            "--without-mingle",
            "--without-gossip",
        ]

    def wait_live(self, names: list[str], timeout_s: float = 60.0) -> None:
        registry = Registry.from_settings(self.settings())
        ids = {self.worker_id(n): n for n in names}

        def ready() -> bool:
            for name in ids.values():
                if not self.workers[name].alive():
                    raise RuntimeError(f"worker {name} exited:\n{self.workers[name].tail()}")
            live = {seen.info.id for seen in registry.live()}
            return all(
                i in live and " ready." in self.workers[n].tail(10**6) for i, n in ids.items()
            )

        if not wait_until(ready, timeout_s, 0.1):
            raise RuntimeError(f"workers {sorted(ids.values())} did not come up")

    # --- faults ----------------------------------------------------------------------

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        if sig == signal.SIGKILL:
            self.killed.add(self.workers[name].popen.pid)
        self.workers[name].signal(sig)

    def name_of(self, worker_id: str | None) -> str | None:
        """``w1`` for this cluster's ``<prefix>-w1``; None for anything else."""
        prefix = f"{self.prefix}-"
        if worker_id and worker_id.startswith(prefix):
            return worker_id.removeprefix(prefix)
        return None

    def note_deaths(self) -> None:
        """Workers that died on their own (not killed by the harness) count as lost."""
        for proc in self.workers.values():
            if not proc.alive() and proc.popen.pid not in self.killed:
                self.lost.add(proc.popen.pid)

    def revive(self) -> None:
        """Restart every dead worker, wait until all three are live again."""
        self.note_deaths()
        dead = [n for n, p in self.workers.items() if not p.alive()]
        for name in dead:
            self.workers[name].stop(1.0)
            self.start_worker(name)
        if dead:
            self.wait_live(dead)

    def purge_dead_queues(self) -> list[str]:
        """Empty the queues of the workers that are down; their names."""
        dead = [n for n, p in self.workers.items() if not p.alive()]
        client = self.redis_client()
        for name in dead:
            client.delete(self.queue(name))
        return dead

    def redis_client(self) -> Redis[bytes]:
        return Redis.from_url(self.redis_url, socket_timeout=5)

    def queue(self, name: str) -> str:
        return f"{QUEUE_PREFIX}{self.worker_id(name)}"

    # --- stopping --------------------------------------------------------------------

    def close(self) -> None:
        """Every process (workers, moto, Redis), the tmpfs, the temp directory."""
        for proc in [*self.others, *self.workers.values(), self.moto, self.redis]:
            if proc is not None:
                with contextlib.suppress(Exception):
                    proc.stop(0.5)
        for mount in self.mounts:
            subprocess.run(["umount", "-l", str(mount)], check=False, capture_output=True)
        self.mounts.clear()
        shutil.rmtree(self.root, ignore_errors=True)
