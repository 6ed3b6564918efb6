"""Running the commands that build the cluster (``ip``, ``tc``), and whether they can run here."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import uuid
from collections.abc import Sequence

from testkit.hosts.errors import HostCommandError, HostsUnavailableError

#: The programs the cluster drives: iproute2's ``ip`` and ``tc``, util-linux's others.
TOOLS = ("ip", "tc", "unshare", "nsenter", "mount")


def sh(argv: Sequence[str], *, check: bool = True, timeout_s: float = 30.0) -> str:
    """Run ``argv``, return its stdout; raise :class:`HostCommandError` naming it on failure."""
    done = subprocess.run(  # noqa: PLW1510 - checked just below, with a readable error
        list(argv), capture_output=True, text=True, timeout=timeout_s
    )
    if check and done.returncode != 0:
        raise HostCommandError(
            f"{' '.join(argv)} failed (exit {done.returncode}): {done.stderr.strip()}"
        )
    return done.stdout


@functools.cache
def unavailable_reason() -> str | None:
    """Why no host cluster can be built on this machine, or None when one can.

    Checked once per process: root, the tools, then a small host really built and
    removed (a container without CAP_NET_ADMIN or CAP_SYS_ADMIN has ``ip`` yet cannot
    use it)."""
    if os.name != "posix" or not os.path.isdir("/proc/self/ns"):
        return "a host cluster needs Linux namespaces"
    if os.geteuid() != 0:
        return "a host cluster needs root (network namespaces, veth, tc, tmpfs mounts)"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"a host cluster needs {', '.join(missing)} (apt install iproute2 util-linux)"
    return _probe()


def _probe() -> str | None:
    """Build what a cluster needs once, in miniature: a namespace, a veth pair into it, a
    tmpfs mounted in a mount namespace of its own. None when all of it works."""
    probe = f"smhprobe{uuid.uuid4().hex[:6]}"
    steps = (
        ["ip", "netns", "add", probe],
        ["ip", "link", "add", probe, "type", "veth", "peer", "name", "eth0", "netns", probe],
        [
            *("ip", "netns", "exec", probe, "unshare", "--mount", "--propagation", "private"),
            *("mount", "-t", "tmpfs", "tmpfs", "/dev/shm"),
        ],
    )
    try:
        for step in steps:
            sh(step)
    except (HostCommandError, OSError, subprocess.SubprocessError) as exc:
        return f"cannot build a host here: {exc}"
    finally:
        sh(["ip", "link", "del", probe], check=False)
        sh(["ip", "netns", "del", probe], check=False)
    return None


def require_hosts() -> None:
    """Raise :class:`HostsUnavailableError` (the reason as its message) unless a cluster can
    be built."""
    reason = unavailable_reason()
    if reason is not None:
        raise HostsUnavailableError(reason)
