"""``ArtifactStore``: node outputs by (run, node, iteration), local first, shared on demand.

A value is encoded once, into this worker's private cache; it reaches the
shared store only when a transfer needs it elsewhere (:meth:`upload`, on the
worker that has it) and another worker's cache only when that worker needs
it (:meth:`download`). Values at most ``inline_max_bytes`` long ride inside
their :class:`ArtifactRef` and never touch the shared store ("direct").
With a shared directory (one machine), larger values go to the RAM tier
while it has room (:mod:`somatize_tasks.store.ram`), where every worker
reads them without a transfer, a link or a disk write.
"""

from __future__ import annotations

import base64
import contextlib
import io
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import ArtifactCorruptError, ArtifactMissingError, DiskFullError
from somatize_tasks.store.codecs import Codec, codec_for, codec_named
from somatize_tasks.store.ids import artifact_key, key_part
from somatize_tasks.store.local import LocalDir, disk_full
from somatize_tasks.store.ram import ram_tier
from somatize_tasks.store.ref import ArtifactRef, TransferType
from somatize_tasks.store.shared import SharedStore, shared_store

#: Where a value is written, by tier: what the message calls it, and the setting. (A
#: full RAM directory is no error: the value goes to the cache, ``store.ram``.)
TIERS = {
    "cache": ("cache", "SOMATIZE_CACHE_DIR"),
    "store": ("shared directory (the store)", "SOMATIZE_STORE_DIR"),
}


@contextlib.contextmanager
def _tier(tier: str, path: Path) -> Iterator[None]:
    """A full disk inside is a :class:`DiskFullError` saying which tier (and where)."""
    try:
        yield
    except OSError as exc:
        if not disk_full(exc):
            raise
        where = str(exc.filename) if exc.filename else str(path)
        raise DiskFullError(str(exc), tier=tier, path=where) from None


def _write_all(fh: IO[bytes], data: bytes) -> None:
    fh.write(data)


def _known_size(value: Any) -> int | None:
    """About how many bytes ``value`` encodes to, known without encoding it (an array,
    bytes), so a large value is written straight to its file, never buffered."""
    size = getattr(value, "nbytes", None)
    if size is None and isinstance(value, bytes | bytearray):
        size = len(value)
    return None if size is None else int(size)


def _free_space(path: Path) -> str:
    for candidate in (path, *path.parents):
        with contextlib.suppress(OSError):
            return f" (a disk of {shutil.disk_usage(candidate).total} bytes)"
    return ""


def _read_file(path: Path, codec: Codec) -> Any:
    """The value in ``path``: memory-mapped where the codec can, else read."""
    if codec.read_file is not None:
        return codec.read_file(path)
    with path.open("rb") as fh:
        return codec.read(fh)


def _read_ram(path: Path, codec: Codec, ref: ArtifactRef) -> Any:
    """A RAM value, checked once it is read (or mapped) to be the file its path led
    to before: a forgotten run's files may become spares, overwritten in place, and
    one is only taken while nobody holds it (see :mod:`somatize_tasks.store.spares`)."""
    try:
        before = _identity(path)
        value = _read_file(path, codec)
        same = _identity(path) == before
    except FileNotFoundError:
        same = False
    if not same:
        raise ArtifactMissingError(
            f"the value of node '{ref.node_id}' (run '{ref.run_id}') was moved or "
            "replaced while it was read: its run was forgotten or collected, or the "
            "node ran again; read it again if its run still exists"
        )
    return value


def _identity(path: Path) -> tuple[int, int, int]:
    """Which file ``path`` is now, and when that file last changed hands (ctime: a
    rename, a claim as a spare and a rewrite all change it)."""
    stat = path.stat()
    return stat.st_dev, stat.st_ino, stat.st_ctime_ns


class ArtifactStore:
    """One worker's view of the artifacts: its cache plus the shared store."""

    def __init__(
        self, settings: Settings, worker_id: str, shared: SharedStore | None = None
    ) -> None:
        self.settings = settings
        self.worker_id = worker_id
        self.cache = LocalDir(settings.cache_dir / key_part("worker id", worker_id))
        self.ram = ram_tier(settings)
        self._shared = shared

    @property
    def shared(self) -> SharedStore:
        """The shared store, connected on first use (workers that never transfer never connect)."""
        if self._shared is None:
            self._shared = shared_store(self.settings)
        return self._shared

    def _where(self) -> str:
        return f"the cache of worker '{self.worker_id}'"

    def put(
        self, run_id: str, node_id: str, iteration: int, value: Any, attempt: int = 0
    ) -> ArtifactRef:
        """Encode ``value``: small values ride inline in the ref (nothing is written to
        disk), larger ones go to the RAM tier if it has room, else the local cache.
        ``attempt`` (fencing) gives each execution of a node a key of its own."""
        key = artifact_key(run_id, node_id, iteration, attempt)
        with self._disk(run_id, node_id, key):
            return self._put(run_id, node_id, iteration, key, value, attempt)

    def publish(self, ref: ArtifactRef, key: str) -> None:
        """Put the value of ``ref`` (not inline) in the shared store under another
        ``key`` (the content cache's), by link where it can. A RAM-tier value is
        copied first: RAM files are recycled in place once their run is gone."""
        source = self._in_ram(ref)
        if source is not None:
            self.cache.copy_in(source, key)
            source = self.cache.path_for(key)
        else:
            self.download(ref)
            source = self.cache.checked_path(ref.key, ref.size, self._where())
        self.shared.upload(source, key)

    def adopt(
        self, source: ArtifactRef, run_id: str, node_id: str, iteration: int, attempt: int = 0
    ) -> ArtifactRef:
        """Make the value of ``source`` (read here already) the output of ``node_id``
        in ``run_id`` (by ``attempt``): inline it stays inline; otherwise its local copy is
        linked under the run's key (no bytes copied), and into a shared directory as
        :meth:`put` does."""
        ref = ArtifactRef(
            run_id=run_id,
            node_id=node_id,
            iteration=iteration,
            attempt=attempt,
            codec=source.codec,
            size=source.size,
            inline=source.inline,
            worker_id=self.worker_id,
        )
        if ref.inline is None:
            self.download(source)
            held = self.cache.checked_path(source.key, source.size, self._where())
            with self._disk(run_id, node_id, ref.key):
                self.cache.link_in(held, ref.key)
            if self.shares_on_write:
                self.shared.upload(self.cache.path_for(ref.key), ref.key)
        return ref

    def _put(
        self, run_id: str, node_id: str, iteration: int, key: str, value: Any, attempt: int
    ) -> ArtifactRef:
        codec = codec_for(value)
        inline = None
        known = _known_size(value)
        if known is not None and known > self.settings.inline_max_bytes:
            size = self._write(key, known, lambda fh: codec.write(value, fh))
        else:
            buffer = io.BytesIO()
            codec.write(value, buffer)
            data = buffer.getvalue()
            size = len(data)
            if size <= self.settings.inline_max_bytes:
                inline = base64.b64encode(data).decode("ascii")
            else:
                self._write(key, size, lambda fh: _write_all(fh, data))
        return ArtifactRef(
            run_id=run_id,
            node_id=node_id,
            iteration=iteration,
            codec=codec.name,
            size=size,
            inline=inline,
            worker_id=self.worker_id,
            attempt=attempt,
        )

    @property
    def shares_on_write(self) -> bool:
        """A shared directory (one machine): every value is linked into it when written,
        so another worker reads it (by link) without a transfer task."""
        return self.settings.store_kind == "local"

    def _write(self, key: str, size: int, writer: Callable[[IO[bytes]], None]) -> int:
        """Write a value of about ``size`` bytes to RAM, or else to the cache (and link it
        into a shared directory); the bytes written. A full RAM directory sends the
        value to the cache; a full cache or shared directory is a :class:`DiskFullError`
        naming its tier (:meth:`_disk` adds the node)."""
        if self.ram is not None:
            written = self.ram.write(key, size, writer)
            if written is not None:
                return written
        with _tier("cache", self.cache.path_for(key)):
            written = self.cache.write(key, writer)
        if self.shares_on_write:
            with _tier("store", self.settings.store_dir):
                self.shared.upload(self.cache.path_for(key), key)
        return written

    def _in_ram(self, ref: ArtifactRef) -> Path | None:
        return None if self.ram is None else self.ram.path(ref.key, ref.size)

    def get(self, ref: ArtifactRef) -> Any:
        """The value: from the ref itself, else the local cache, else the shared store."""
        codec = codec_named(ref.codec)
        raw = ref.inline_bytes()
        if raw is not None:
            return codec.read(io.BytesIO(raw))
        path = self._in_ram(ref)
        if path is not None:
            return _read_ram(path, codec, ref)
        self.download(ref)
        return _read_file(self.cache.checked_path(ref.key, ref.size, self._where()), codec)

    def held_path(self, key: str, size: int) -> Path | None:
        """The file holding ``key`` here (RAM tier or cache) if it has exactly ``size``
        bytes: what this worker can serve to another (see ``transfer.peer_server``)."""
        held = None if self.ram is None else self.ram.path(key, size)
        if held is None and self.cache.has(key, size):
            held = self.cache.path_for(key)
        return held

    def has_local(self, ref: ArtifactRef) -> bool:
        return (
            ref.inline is not None
            or self._in_ram(ref) is not None
            or self.cache.has(ref.key, ref.size)
        )

    def upload(self, ref: ArtifactRef) -> TransferType:
        """Make the value reachable by other workers; says how it will travel."""
        if ref.inline is not None:
            return "direct"
        if self._in_ram(ref) is not None or self.shared.exists(ref.key, ref.size):
            return "cached"
        source = self.cache.checked_path(ref.key, ref.size, self._where())
        self.shared.upload(source, ref.key)
        return "s3"

    def download(self, ref: ArtifactRef) -> None:
        """Fill the local cache from the shared store, unless it is inline or already here."""
        if self.has_local(ref):
            return
        with self._disk(ref.run_id, ref.node_id, ref.key):
            self.shared.download(ref.key, self.cache, ref.size)

    def receive(self, ref: ArtifactRef, writer: Callable[[IO[bytes]], None]) -> int:
        """Write ``ref``'s value into this worker's cache with ``writer`` (a value
        arriving from another worker); it appears only if ``writer`` returns and the
        file holds exactly ``ref.size`` bytes. The bytes written."""
        with self._disk(ref.run_id, ref.node_id, ref.key):
            written = self.cache.write(ref.key, writer)
        if written != ref.size:
            self.cache.path_for(ref.key).unlink(missing_ok=True)
            raise ArtifactCorruptError(
                f"artifact '{ref.key}' arrived with {written} bytes; its ref says {ref.size}"
            )
        return written

    @contextlib.contextmanager
    def _disk(self, run_id: str, node_id: str, key: str) -> Iterator[None]:
        """A full disk while writing ``key`` is a :class:`DiskFullError` naming node,
        run, worker, tier, path and the disk's size (the partial file is already gone:
        writes go to a temporary name, deleted on failure)."""
        try:
            yield
        except DiskFullError as exc:
            if exc.tier is None or exc.path is None:
                raise
            raise self._full(run_id, node_id, exc.tier, Path(exc.path)) from None
        except OSError as exc:
            if not disk_full(exc):
                raise
            path = Path(exc.filename) if exc.filename else self.cache.path_for(key)
            raise self._full(run_id, node_id, "cache", path) from None

    def _full(self, run_id: str, node_id: str, tier: str, path: Path) -> DiskFullError:
        name, setting = TIERS[tier]
        return DiskFullError(
            f"no space left on device: cannot write the value of node '{node_id}' "
            f"(run '{run_id}') on worker '{self.worker_id}' to the {name} at {path}"
            f"{_free_space(path)}. Free space there or point {setting} at a larger disk.",
            tier=tier,
            path=str(path),
        )

    def delete_run(self, run_id: str) -> None:
        """Forget every artifact of a run, here and in the shared store."""
        prefix = key_part("run id", run_id) + "/"
        self.cache.delete_prefix(prefix)
        if self.ram is not None:
            self.ram.delete_prefix(prefix)
        self.shared.delete_prefix(prefix)
