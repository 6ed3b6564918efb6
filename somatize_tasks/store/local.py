"""A directory of artifacts with atomic writes and size-checked reads.

Used twice: as each worker's private cache, and as the shared store on a
single machine. A file appears under its final name only once it is
complete (written to a temporary name in the same directory, then renamed),
so a reader never sees half a value.
"""

from __future__ import annotations

import errno
import io
import os
import re
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO

from somatize_tasks.errors import ArtifactCorruptError, ArtifactMissingError

#: NumPy's short write (``tofile`` into a full disk): an ``OSError`` with no errno.
_SHORT_WRITE = re.compile(r"^\d+ requested and \d+ written$")


def disk_full(exc: OSError) -> bool:
    """Whether ``exc`` says its file system is full: ``ENOSPC``/``EDQUOT``, or NumPy's
    ``OSError("524288 requested and 523248 written")``, which carries no errno."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return exc.errno is None and bool(_SHORT_WRITE.match(str(exc)))


def _open_for_writing(temp: Path, recycle: Callable[[Path], bool] | None) -> IO[bytes]:
    """``temp`` opened to be written: a recycled file if ``recycle`` put one there and
    it can be opened, else a new one.

    Not ``open("r+b")``: NumPy writes an array straight from memory only into a
    ``BufferedWriter``; into anything else it copies it in chunks first."""
    if recycle is not None and recycle(temp):
        try:
            return io.BufferedWriter(io.FileIO(temp, "r+"))
        except OSError:  # not ours to write (another user's spare): a new file instead
            temp.unlink(missing_ok=True)
    return temp.open("wb")


class LocalDir:
    """Artifacts under ``root``, addressed by keys from :func:`artifact_key`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path_for(self, key: str) -> Path:
        return self.root.joinpath(*key.split("/"))

    def write(
        self,
        key: str,
        writer: Callable[[IO[bytes]], None],
        recycle: Callable[[Path], bool] | None = None,
    ) -> int:
        """Run ``writer`` on a temporary file, then move it into place; returns its size.

        ``recycle(temp)`` may put an old file at the temporary name first: it is
        then overwritten in place (its pages reused) and cut where ``writer`` stopped,
        so ``writer`` must write its value from the start, in order (every codec does).
        """
        final = self.path_for(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        temp = final.with_name(f".{final.name}.{uuid.uuid4().hex}.tmp")
        try:
            with _open_for_writing(temp, recycle) as fh:
                writer(fh)
                fh.truncate()
            size = temp.stat().st_size
            os.replace(temp, final)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        return size

    def copy_in(self, source: Path, key: str) -> int:
        """Copy a file in atomically (streamed, never whole in memory)."""

        def copy(fh: IO[bytes]) -> None:
            with source.open("rb") as src:
                shutil.copyfileobj(src, fh, 1024 * 1024)

        return self.write(key, copy)

    def link_in(self, source: Path, key: str) -> int:
        """Put ``source`` in under ``key`` without copying it (a hard link), when it is
        on the same file system; a copy otherwise. Artifacts are never changed in
        place (every write is a new file), so sharing the file is safe."""
        final = self.path_for(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        temp = final.with_name(f".{final.name}.{uuid.uuid4().hex}.tmp")
        try:
            os.link(source, temp)
        except OSError:  # another file system, or no hard links there
            return self.copy_in(source, key)
        try:
            os.replace(temp, final)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        return final.stat().st_size

    def has(self, key: str, size: int) -> bool:
        """True if a complete copy of ``size`` bytes is here."""
        try:
            return self.path_for(key).stat().st_size == size
        except FileNotFoundError:
            return False

    def checked_path(self, key: str, size: int, where: str) -> Path:
        """The path of ``key``, verified to hold exactly ``size`` bytes."""
        path = self.path_for(key)
        try:
            actual = path.stat().st_size
        except FileNotFoundError:
            raise ArtifactMissingError(f"artifact '{key}' is not in {where}") from None
        if actual != size:
            raise ArtifactCorruptError(
                f"artifact '{key}' in {where} has {actual} bytes; its ref says {size}"
            )
        return path

    def delete_prefix(self, prefix: str) -> None:
        shutil.rmtree(self.path_for(prefix.rstrip("/")), ignore_errors=True)
