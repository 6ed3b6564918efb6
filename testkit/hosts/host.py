"""One host: a network namespace, and a mount namespace held open by an anchor process.

The anchor (``sleep infinity``, started with ``ip netns exec NS unshare -m
--propagation private``) mounts two tmpfs of the host's own before it
sleeps: on ``/dev/shm`` and on the host's private directory (its cache,
store and temp directories live there). Everything run "on the host"
enters the anchor's mount and network namespaces with ``nsenter``, so the
host's worker, a benchmark's Dask worker and a test's probe all see the
same ``/dev/shm`` and directory, as processes on one machine do, and no
other host (nor the root namespace) sees them at all: there, that
directory is an empty folder.

Every process is tied to the Python process that started it
(``PR_SET_PDEATHSIG``): if that one dies, they get SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from somatize_tasks.local_cluster.processes import ProcessRef, spawn, stop_group, wait_until
from testkit.hosts.errors import HostCommandError
from testkit.hosts.names import kill_namespace_processes
from testkit.hosts.shell import sh

#: The size limit of each of a host's two tmpfs (memory is used only as files are written).
TMPFS_SIZE = "2g"
ANCHOR_START_S = 10.0


@dataclass
class Host:
    """A host of the cluster: its name, address, namespace, link and private directory."""

    name: str
    index: int
    address: str
    netns: str
    link: str
    private_dir: Path
    log_dir: Path
    anchor: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    # --- its directories (visible inside the host only) ----------------------------------

    @property
    def cache_dir(self) -> Path:
        return self.private_dir / "cache"

    @property
    def store_dir(self) -> Path:
        return self.private_dir / "store"

    @property
    def tmp_dir(self) -> Path:
        return self.private_dir / "tmp"

    # --- life ----------------------------------------------------------------------------

    def start_anchor(self) -> None:
        """Mount the host's tmpfs in a new mount namespace and hold it open."""
        self.private_dir.mkdir(parents=True, exist_ok=True)
        dirs = " ".join(str(d) for d in (self.cache_dir, self.store_dir, self.tmp_dir))
        script = (
            f"mount -t tmpfs -o size={TMPFS_SIZE},mode=1777 tmpfs /dev/shm"
            f" && mount -t tmpfs -o size={TMPFS_SIZE},mode=0755 tmpfs {self.private_dir}"
            f" && mkdir -p {dirs} && exec sleep infinity"
        )
        argv = ["ip", "netns", "exec", self.netns, "unshare", "--mount"]
        argv += ["--propagation", "private", "sh", "-c", script]
        self.anchor = spawn(
            argv,
            env=os.environ,
            log_path=self.log_dir / f"anchor-{self.name}.log",
            tie_to_parent=True,
        )
        if not wait_until(self._anchored, ANCHOR_START_S):
            log = (self.log_dir / f"anchor-{self.name}.log").read_text(errors="replace")
            raise HostCommandError(f"host {self.name}: its mount namespace never came up: {log}")

    def _anchored(self) -> bool:
        """The anchor has mounted both tmpfs and exec'd ``sleep`` (ip, unshare and sh exec
        in turn, so the pid stays the same)."""
        assert self.anchor is not None
        if self.anchor.poll() is not None:
            return True  # start_anchor's check below reports it
        try:
            return Path(f"/proc/{self.anchor.pid}/comm").read_text().strip() == "sleep"
        except OSError:
            return False

    def stop(self) -> None:
        """Kill everything running in the host, then its anchor (the mounts go with it)."""
        kill_namespace_processes(self.netns)
        if self.anchor is not None:
            stop_group(ProcessRef.of(self.anchor.pid), grace_s=2.0, reap=self.anchor.poll)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.anchor.wait(2)

    # --- running things on it ------------------------------------------------------------

    def argv(self, command: Sequence[str], cwd: Path | None = None) -> list[str]:
        """``command`` as run inside the host (its mounts and network), from ``cwd``."""
        if self.anchor is None or self.anchor.poll() is not None:
            raise HostCommandError(f"host {self.name} is not running (no anchor process)")
        enter = ["nsenter", "--target", str(self.anchor.pid), "--mount", "--net"]
        return [*enter, f"--wd={cwd or Path.cwd()}", "--", *command]

    def popen(
        self,
        command: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``command`` on the host, in a process group of its own, output to ``log_path``.

        ``env`` is the whole environment (default: this process's); ``TMPDIR`` is the
        host's own temp directory unless ``env`` sets it."""
        environment = {"TMPDIR": str(self.tmp_dir), **(os.environ if env is None else env)}
        return spawn(
            self.argv(command, cwd), env=environment, log_path=log_path, cwd=cwd, tie_to_parent=True
        )

    def run(
        self, command: Sequence[str], *, timeout_s: float = 60.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run ``command`` on the host to its end; its output captured as text."""
        done = subprocess.run(  # noqa: PLW1510 - checked just below, with a readable error
            self.argv(command),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, "TMPDIR": str(self.tmp_dir)},
        )
        if check and done.returncode != 0:
            raise HostCommandError(
                f"on host {self.name}: {' '.join(command)} failed (exit {done.returncode}): "
                f"{done.stderr.strip()}"
            )
        return done

    def pids(self) -> list[int]:
        """Every process in the host's network namespace (its anchor included)."""
        return [int(p) for p in sh(["ip", "netns", "pids", self.netns], check=False).split()]

    def kill_all(self, sig: int = signal.SIGKILL) -> None:
        """Signal every process on the host but its anchor: the machine loses its work."""
        anchor = self.anchor.pid if self.anchor is not None else None
        for pid in self.pids():
            if pid != anchor:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
