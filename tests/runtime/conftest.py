"""Fixtures of the runtime tests: a redis-server of a test's own, which it may stop."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from tests.conftest import free_port, wait_for


class OwnRedis:
    """A redis-server with an append-only file, which a test may stop and start again."""

    def __init__(self, root: Path) -> None:
        self.root, self.port = root, free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes", "--dir", str(self.root)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
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
