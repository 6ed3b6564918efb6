"""Services a test or benchmark starts for itself: ports, a throwaway Redis, S3 details, polling."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from dataclasses import dataclass

import boto3
from redis import Redis
from redis.exceptions import RedisError


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def answers(url: str) -> bool:
    try:
        return bool(Redis.from_url(url, socket_connect_timeout=0.5).ping())
    except (RedisError, OSError):
        return False


def start_redis_server(*extra: str) -> tuple[subprocess.Popen[bytes], int]:
    """A throwaway ``redis-server`` on a free port (no persistence)."""
    port = free_port()
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return proc, port
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("redis-server did not start")


@dataclass(frozen=True)
class S3Endpoint:
    url: str
    bucket: str
    access_key_id: str = "testing"
    secret_access_key: str = "testing-secret"

    def client(self) -> object:
        return boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
        )


def wait_for(predicate: object, timeout_s: float, interval_s: float = 0.05) -> bool:
    """Poll ``predicate()`` until it is true or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(interval_s)
    return bool(predicate())  # type: ignore[operator]
