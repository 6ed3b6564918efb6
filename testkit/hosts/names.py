"""Short, unique names for one cluster's namespaces, links and directory, and the sweep of
what a dead cluster left behind.

Every name starts with ``smh``, the owning process's pid (6 hex digits) and
a random byte (2 hex digits): ``smh01a2b3c7f``. The bridge adds ``b``, a
host's link ``v<i>``, a host's namespace ``-<host>``; the longest interface
name is 14 characters (Linux allows 15). Two clusters (two test sessions,
or two in one process) never share a name, and a name says which process
owns it, so :func:`sweep_leftovers` can remove what a crashed process left
(its pid is gone) without touching a live cluster's.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from testkit.hosts.shell import sh

PREFIX = "smh"
#: Interface names are at most 15 bytes (IFNAMSIZ - 1).
IFNAME_MAX = 15
_OWNED = re.compile(rf"^{PREFIX}(?P<pid>[0-9a-f]{{6}})(?P<tag>[0-9a-f]{{2}})(?P<rest>b|v\d+|-.+)$")


@dataclass(frozen=True)
class ClusterNames:
    """The names one cluster uses; ``stem`` is ``smh`` + pid + random tag."""

    pid: int = field(default_factory=os.getpid)
    tag: str = field(default_factory=lambda: secrets.token_hex(1))

    @property
    def stem(self) -> str:
        return f"{PREFIX}{self.pid:06x}{self.tag}"

    @property
    def bridge(self) -> str:
        return f"{self.stem}b"

    def link(self, index: int) -> str:
        """The root-namespace end of host ``index``'s veth pair (the bridge port)."""
        name = f"{self.stem}v{index}"
        if len(name) > IFNAME_MAX:
            raise ValueError(f"host index {index} makes the interface name {name!r} too long")
        return name

    def netns(self, host: str) -> str:
        if not re.fullmatch(r"[a-z0-9]{1,12}", host):
            raise ValueError(f"host name {host!r}: use 1-12 lowercase letters or digits")
        return f"{self.stem}-{host}"

    def root_dir(self) -> Path:
        """The cluster's directory (logs, each host's private directory), made now."""
        return Path(tempfile.mkdtemp(prefix=f"{self.stem}-", dir=tempfile.gettempdir()))


def _owner_gone(name: str) -> bool:
    """True when ``name`` is a cluster's and the process that made it is gone."""
    match = _OWNED.match(name)
    if match is None:
        return False
    pid = int(match["pid"], 16)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _namespaces() -> list[str]:
    return [line.split()[0] for line in sh(["ip", "netns", "list"]).splitlines() if line.strip()]


def _links() -> list[str]:
    """Every interface name in the root namespace (``name@peer`` cut to ``name``)."""
    names = []
    for line in sh(["ip", "-o", "link", "show"]).splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            names.append(parts[1].strip().split("@")[0])
    return names


def kill_namespace_processes(netns: str) -> None:
    """SIGKILL every process still inside ``netns`` (a crashed cluster's workers)."""
    for pid in sh(["ip", "netns", "pids", netns], check=False).split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def sweep_leftovers() -> list[str]:
    """Remove every namespace, interface and directory of a cluster whose process is gone.

    Returns what it removed (for a log line). Never touches a live process's cluster."""
    removed: list[str] = []
    for netns in filter(_owner_gone, _namespaces()):
        kill_namespace_processes(netns)
        sh(["ip", "netns", "del", netns], check=False)
        removed.append(f"netns {netns}")
    # Bridge ports first: a bridge goes last so no port is left dangling on it.
    for link in sorted(filter(_owner_gone, _links()), key=lambda n: n.endswith("b")):
        sh(["ip", "link", "del", link], check=False)
        removed.append(f"link {link}")
    for path in Path(tempfile.gettempdir()).glob(f"{PREFIX}*-*"):
        if path.is_dir() and _owner_gone(path.name):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(f"dir {path}")
    return removed
