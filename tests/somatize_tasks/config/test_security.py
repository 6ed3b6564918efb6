"""Redis over TLS with a password, end to end: a real worker, a real run, nothing leaked."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from somatize_tasks.config.settings import Settings
from somatize_tasks.runtime.producer.submit import submit_plan
from testkit.nodes import run_nodes  # noqa: F401
from testkit.plans import ex, seq
from testkit.services import free_port, wait_for
from testkit.workers import WorkerFactory

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("redis-server") is None or shutil.which("openssl") is None,
        reason="needs redis-server and openssl",
    ),
]
PASSWORD = "tls-s3cret"


@pytest.fixture
def tls_redis(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A redis-server speaking only TLS, with a password and a self-signed certificate."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    port = free_port()
    server = subprocess.Popen(
        [
            "redis-server",
            "--port",
            "0",
            "--tls-port",
            str(port),
            "--tls-cert-file",
            str(cert),
            "--tls-key-file",
            str(key),
            "--tls-ca-cert-file",
            str(cert),
            "--tls-auth-clients",
            "no",
            "--requirepass",
            PASSWORD,
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"rediss://:{PASSWORD}@127.0.0.1:{port}/0"

    def answers() -> bool:
        try:
            return bool(Redis.from_url(url, ssl_ca_certs=str(cert)).ping())
        except Exception:
            return False

    try:
        if not wait_for(answers, 10):
            pytest.skip("this redis-server does not speak TLS")
        yield url, cert
    finally:
        server.kill()
        server.wait()


def test_a_run_works_over_tls_with_a_password_and_never_logs_it(
    tls_redis: tuple[str, Path], tmp_path: Path
) -> None:
    url, cert = tls_redis
    settings = Settings(
        redis_url=url,
        redis_ssl_ca_certs=cert,
        key_prefix="tls",
        heartbeat_interval_s=0.5,
        store_kind="local",
        store_dir=tmp_path / "store",
        cache_dir=tmp_path / "cache",
        worker_id="tls-producer",
    )
    factory = WorkerFactory(settings, tmp_path)
    try:
        worker = factory.start("secure", tags="cpu")
        run = submit_plan(
            seq(ex("rt_add"), ex("rt_double")), input=2, settings=settings, require_workers=True
        )
        assert run.wait(timeout=60) == 6
        assert PASSWORD not in worker.log()
        assert "rediss://:**@127.0.0.1" in worker.log()  # Celery shows where, never the secret
    finally:
        factory.close()
