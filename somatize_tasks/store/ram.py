"""``RamTier``: values that cross workers on one machine, kept in RAM (tmpfs).

With a shared directory (every worker on one machine), a value larger than
the inline limit is written once into a RAM-backed directory
(``SOMATIZE_RAM_DIR``, ``/dev/shm/somatize`` by default) instead of the
disk cache, and every worker reads it from there memory-mapped. On this
machine's ext4 disk a 256 MiB write took 0.04 to 0.7 s depending on the
writeback of earlier values; into tmpfs it takes a steady ~0.1 s, and
nothing is ever written back to disk.

RAM is scarce, so the tier is bounded twice:

- a budget, ``SOMATIZE_RAM_MAX_BYTES`` (0 turns the tier off): what the
  tier holds (this cluster's key prefix, all workers) plus the new value
  must fit. The total is recounted at most once a second per process, so
  concurrent writers may overshoot by the values they write meanwhile;
- the file system's own room: a value is refused when it would leave less
  than :data:`MIN_FREE_FRACTION` of the tmpfs free (a container's 64 MiB
  ``/dev/shm`` fills fast), and a write that hits "no space" anyway is
  removed.

A refused value goes to the disk cache as before. Files are laid out like
every store (``<run>/<node>/<iteration>`` under ``<ram dir>/<key prefix>``)
and go with their run: ``delete_prefix`` when the run is forgotten or
collected, and the workers' cache sweep for a run whose collector ran
elsewhere (:mod:`somatize_tasks.store.gc`). Deleted files nobody holds open are
kept as spares for the next values (:mod:`somatize_tasks.store.spares`),
within a quarter of the budget.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from somatize_tasks.config.settings import Settings
from somatize_tasks.store.ids import key_part
from somatize_tasks.store.local import LocalDir, disk_full
from somatize_tasks.store.spares import SPARE_DIR, SparePool

log = logging.getLogger(__name__)

#: A value is refused if it would leave less than this share of the file system free.
MIN_FREE_FRACTION = 0.1
#: Seconds between recounts of the tier's total size (per process).
RECOUNT_S = 1.0


class RamTier:
    """One cluster's RAM directory on this machine, with a size budget."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.dir = LocalDir(root)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._counted = 0
        self._counted_at = -RECOUNT_S
        self.spares = SparePool(root, max_bytes // 4)

    @property
    def root(self) -> Path:
        return self.dir.root

    def describe(self) -> str:
        return f"RAM directory {self.root}"

    def used_bytes(self) -> int:
        """What the tier holds now (recounted at most every :data:`RECOUNT_S`)."""
        with self._lock:
            if time.monotonic() - self._counted_at >= RECOUNT_S:
                self._counted = _tree_bytes(self.root)
                self._counted_at = time.monotonic()
            return self._counted

    def admits(self, size: int) -> bool:
        """Whether a value of ``size`` bytes fits the budget and the file system's room."""
        if size > self.max_bytes or self.used_bytes() + size > self.max_bytes:
            return False
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fs = os.statvfs(self.root)
        except OSError:  # no such file system here (no /dev/shm), or not writable
            return False
        total, free = fs.f_blocks * fs.f_frsize, fs.f_bavail * fs.f_frsize
        if free - size < MIN_FREE_FRACTION * total and self.spares.trim(0):
            return self.admits(size)  # the room the spares held may be enough
        return free - size >= MIN_FREE_FRACTION * total

    def write(self, key: str, size: int, writer: Callable[[IO[bytes]], None]) -> int | None:
        """Write a value of about ``size`` bytes here if it fits: the bytes written, or
        None (nothing left behind) if it does not, so the caller writes it to disk."""
        if not self.admits(size):
            return None
        try:
            written = self.dir.write(key, writer, lambda temp: self.spares.claim(size, temp))
        except OSError as exc:
            if not disk_full(exc):
                raise
            log.warning("%s is full; writing '%s' to the disk cache instead", self.describe(), key)
            return None
        with self._lock:
            self._counted += written
        return written

    def path(self, key: str, size: int) -> Path | None:
        """The file of ``key`` if this machine's tier holds all ``size`` bytes of it."""
        return self.dir.path_for(key) if self.dir.has(key, size) else None

    def delete_prefix(self, prefix: str) -> None:
        """Delete every value under ``prefix``, keeping what fits as spares."""
        top = self.dir.path_for(prefix.rstrip("/"))
        for folder, _, names in os.walk(top):
            for name in names:
                path = Path(folder, name)
                with contextlib.suppress(OSError):
                    if not name.startswith("."):  # a write in progress is not a value
                        self.spares.keep(path, path.stat().st_size)
        self.dir.delete_prefix(prefix)


def ram_tier(settings: Settings) -> RamTier | None:
    """The RAM tier of these settings, or None: off (``ram_max_bytes`` 0) or not on one
    machine (only a shared directory means every worker can read this machine's RAM)."""
    if settings.store_kind != "local" or settings.ram_max_bytes <= 0:
        return None
    root = settings.ram_dir / key_part("key prefix", settings.key_prefix)
    return RamTier(root, settings.ram_max_bytes)


def _tree_bytes(root: Path) -> int:
    """Bytes of every file under ``root`` (files vanishing meanwhile count 0)."""
    total = 0
    stack = [root]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.name == SPARE_DIR:
                    continue  # spares are not values; their own budget bounds them
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                else:
                    total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
    return total
