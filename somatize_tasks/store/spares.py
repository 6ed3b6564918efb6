"""Spare RAM files: a deleted value's memory, kept for the next value.

A new file in tmpfs takes fresh pages: the kernel allocates and zeroes each
4 KiB page, and on a VM that reports free memory to its host (Firecracker,
this machine) touching a page the host took back costs a fault there too.
Overwriting a file that still holds its pages skips all that. Measured here
for 16 MiB: ~4 ms in place, ~10 ms into pages freed moments before, 45 to
60 ms into pages the host took back; for 256 MiB: 0.05 s, 0.2 s and ~1 s.

So when a run's values leave the RAM tier (``run.forget()``, collection),
they are moved here instead of being deleted, up to a byte budget and
:data:`MAX_SPARES` files, and the next value written claims one: a rename,
atomic across processes, so two writers never share a file. The writer
overwrites it in place and truncates it to its own size. Spares idle for
:data:`IDLE_S` are deleted (as ``malloc`` gives back memory it stops
using), and all of them when the file system is short of room.

A file is only recycled if nobody has it open or mapped: values are read
memory-mapped, and a mapping must never see its bytes change. The kernel
says so: a write lease (``F_SETLEASE``) is granted only on a file no other
descriptor or mapping holds, and while it is held, whoever opens the file
waits. So the file is leased, renamed away, checked again (see
:func:`_alone`), then released; a reader that opened it meanwhile finds,
once it has it mapped, that its path no longer leads to the same file, and
says so (``ArtifactStore.get``). A file with a second name is never taken,
and one the lease is refused for (in use, owned by another user, a system
without leases) is deleted as before: a mapping keeps an unlinked file's
pages, never a recycled one's.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

#: At most this many spares, so claiming one lists a short directory.
MAX_SPARES = 64
#: A spare unused this long is deleted.
IDLE_S = 60.0
#: A spare is claimed for a value at most this many times larger or smaller.
FIT = 2.0
#: The spares' directory under the tier's root (a dot name: never a run's).
SPARE_DIR = ".spare"


class SparePool:
    """The spare files of one RAM tier, in ``<root>/.spare``, within ``max_bytes``."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.dir = root / SPARE_DIR
        self.max_bytes = max_bytes

    def keep(self, path: Path, size: int) -> bool:
        """Move the value file ``path`` (``size`` bytes) in as a spare if it fits and
        nobody holds it; False if not (the caller deletes it). The budget is checked
        per call: processes keeping spares at once may overshoot it by what they keep."""
        spares = self._list()
        if len(spares) >= MAX_SPARES or sum(s for s, _, _ in spares) + size > self.max_bytes:
            return False
        spare = self.dir / uuid.uuid4().hex
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            with _leased(path) as fd:
                if os.fstat(fd).st_nlink != 1:
                    return False  # another name reaches it: a reader could map it there
                os.utime(fd)  # idle time counts from now (no sweep takes it for a leftover)
                os.rename(path, spare)
                if not _alone(fd, spare):
                    spare.unlink(missing_ok=True)
                    return False
        except OSError:  # in use, not ours to lease, or no leases here: not recycled
            return False
        return True

    def claim(self, size: int, into: Path) -> bool:
        """Rename a spare to ``into`` for a value of ``size`` bytes: the one nearest in
        size, within a factor of :data:`FIT` either way (a far larger one would be cut
        down, freeing what a later large value could use; a far smaller one saves
        little). False if none could be had."""
        spares = [spare for spare in self._list() if size / FIT <= spare[0] <= size * FIT]
        for _, _, path in sorted(spares, key=lambda spare: abs(spare[0] - size)):
            try:
                os.rename(path, into)
            except FileNotFoundError:  # another writer claimed it first
                continue
            except OSError:
                return False
            os.utime(into)
            return True
        return False

    def trim(self, idle_s: float = IDLE_S) -> int:
        """Delete spares unused for ``idle_s`` seconds (all of them for 0); how many."""
        cutoff = time.time() - idle_s
        deleted = 0
        for _, mtime, path in self._list():
            if idle_s <= 0 or mtime < cutoff:
                path.unlink(missing_ok=True)
                deleted += 1
        return deleted

    def _list(self) -> list[tuple[int, float, Path]]:
        """(size, mtime, path) of every spare now."""
        found = []
        try:
            entries = list(os.scandir(self.dir))
        except FileNotFoundError:
            return []
        for entry in entries:
            try:
                stat = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            found.append((stat.st_size, stat.st_mtime, Path(entry.path)))
        return found


@contextlib.contextmanager
def _leased(path: Path) -> Iterator[int]:
    """A descriptor of ``path`` with a write lease on it: proof that no one else had it
    open or mapped, and whoever opens it meanwhile waits. OSError if refused."""
    if not hasattr(fcntl, "F_SETLEASE"):
        raise OSError(errno.ENOTSUP, "this system has no file leases")
    fd = os.open(path, os.O_RDONLY)
    try:
        # A lease holder is signalled when someone waits on it; SIGIO (the default)
        # would end this process, SIGURG is ignored unless handled.
        fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
        try:
            yield fd
        finally:
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
    finally:
        os.close(fd)


def _alone(fd: int, spare: Path) -> bool:
    """After the rename: is ``spare`` the file leased through ``fd``, still held by no one?

    The kernel checks for a lease before it counts a read-only open, so an open
    that was under way when the lease was granted shows only now: leasing again
    re-runs the check (and fails while an opener waits on the lease). A file put
    at the path between the open and the rename (the same key written again) is
    not the one leased.
    """
    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
        leased, moved = os.fstat(fd), os.lstat(spare)
    except OSError:
        return False
    return (leased.st_dev, leased.st_ino) == (moved.st_dev, moved.st_ino)
