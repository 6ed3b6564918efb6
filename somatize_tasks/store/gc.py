"""Nothing unbounded: a run's files go when its state goes.

A run's state in Redis expires ``run_ttl_s`` after it ends; its files
would not. Two sweeps close that gap, both keyed on the one fact that
matters, "is ``<p>:run:<id>`` still in Redis?":

:class:`RunCollector` (the elected reaper, and ``somatize-tasks gc``)
    Walks the runs index (``<p>:runs``, scored by creation time) from its
    oldest entry. A run created less than ``run_ttl_s`` ago cannot have
    expired (its meta gets that TTL when created, from every reaper sweep
    while it runs, and again when it ends),
    so only older entries are looked at. For each one whose meta is gone it
    deletes the run's objects in the shared store (S3 or the directory),
    any run key left without a TTL (a run that never finished), and its
    index entries. The index is trimmed by exactly that.
:class:`CacheSweeper` (every worker, the producer, ``somatize-tasks gc``)
    Each worker's private cache (``<cache_dir>/<worker id>/<run>/...``) is
    only on its machine, so each machine sweeps its own: a run directory
    not written for ``run_ttl_s`` is checked (one pipelined ``EXISTS`` per
    batch) and deleted if its run is gone. Younger directories are never
    checked, which also keeps the sweep away from a run whose producer is
    still writing its input before the run exists in Redis. The machine's
    RAM tier (``<ram_dir>/<key prefix>/<run>/...``, shared directory only)
    is swept the same way, as one of ``ram_roots``, but checked once
    :data:`RAM_ORPHAN_S` old (RAM is scarce: a node that finished after its
    run was cancelled and forgotten may have written there); its idle spare
    files are trimmed (:mod:`somatize_tasks.store.spares`). A cache's copies of
    content-cache values (``<cache>/__cache__/...``, :mod:`somatize_tasks.cache`) belong
    to no run: each goes once nobody linked or wrote it for :data:`CACHE_COPY_S`
    (the shared store keeps the value; a reader fetches it again).

Both are idempotent and safe to run in many processes at once.

Partial files: every write goes to a temporary name (``.<name>.<hex>.tmp``,
and boto3's own ``...tmp.<hex>`` beside it) and is renamed when complete or
deleted when it fails; only a killed process leaves one behind.
:func:`sweep_temp_files` deletes those: a worker's own cache at its start
(nothing of its own can be in flight then), and any cache or shared
directory from the sweeper and ``somatize-tasks gc`` once untouched for
:data:`TEMP_GRACE_S`. In S3, :meth:`RunCollector.abort_stale_uploads` aborts
multipart uploads under the project's prefix started more than a grace ago
(a worker killed mid-upload leaves its parts billed and invisible).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from urllib.parse import unquote

from redis import Redis

from somatize_tasks.config.clock import redis_now
from somatize_tasks.config.keys import RedisKeys
from somatize_tasks.errors import StoreError
from somatize_tasks.store import CACHE_RUN, SharedStore, key_part
from somatize_tasks.store.spares import SparePool

log = logging.getLogger(__name__)

BATCH = 500
#: A temporary file untouched this long is a leftover (a live write touches it constantly).
TEMP_GRACE_S = 600.0
#: A RAM tier directory (``ram_roots``) this old whose run is gone is deleted.
RAM_ORPHAN_S = 600.0
#: A worker's copy of a content-cache value untouched this long is deleted.
CACHE_COPY_S = 600.0
#: A multipart upload started this long ago is abandoned.
UPLOAD_GRACE_S = 3600.0
_TEMP_NAME = re.compile(r"^\..+\.[0-9a-f]{32}\.tmp(\.[0-9a-fA-F]{8})?$")


def sweep_temp_files(root: Path, grace_s: float = TEMP_GRACE_S) -> int:
    """Delete the temporary files of unfinished writes under ``root`` not modified
    for ``grace_s`` seconds; how many were deleted."""
    cutoff = time.time() - grace_s
    deleted = 0
    for folder, _, files in os.walk(root):
        for name in files:
            if not _TEMP_NAME.match(name):
                continue
            path = Path(folder, name)
            try:
                if grace_s <= 0 or path.stat().st_mtime < cutoff:
                    path.unlink()
                    deleted += 1
            except FileNotFoundError:
                continue
    if deleted:
        log.info("deleted %d partial file(s) left under %s", deleted, root)
    return deleted


def sweep_cache_copies(root: Path, age_s: float = CACHE_COPY_S) -> int:
    """Delete the copies of content-cache values under ``root`` whose file was last
    linked or written more than ``age_s`` ago (``st_ctime``: a hard link to it, as a
    read through a shared directory makes, renews it); how many were deleted."""
    cutoff = time.time() - age_s
    deleted = 0
    for folder, _, files in os.walk(root):
        for name in files:
            path = Path(folder, name)
            try:
                if path.stat().st_ctime < cutoff:
                    path.unlink()
                    deleted += 1
            except FileNotFoundError:
                continue
    return deleted


class RunCollector:
    """Deletes the shared artifacts and leftover keys of runs whose state expired."""

    def __init__(
        self,
        client: Redis[bytes],
        keys: RedisKeys,
        shared: Callable[[], SharedStore],
        run_ttl_s: float,
        upload_grace_s: float = UPLOAD_GRACE_S,
    ) -> None:
        self.client = client
        self.keys = keys
        self.shared = shared
        self.run_ttl_s = run_ttl_s
        self.upload_grace_s = upload_grace_s
        self.aborted_uploads = 0  # by the last collect()

    def collect(self, *, max_batches: int | None = None) -> list[str]:
        """Collect expired runs, oldest first (the ids collected), then abort stale
        multipart uploads (how many: ``aborted_uploads``).

        Old runs still alive (running longer than the TTL) are stepped over,
        so they never hide the expired ones behind them.
        """
        collected: list[str] = []
        skip = batches = 0
        while max_batches is None or batches < max_batches:
            looked, gone = self._collect_batch(skip)
            collected += gone
            skip += looked - len(gone)
            batches += 1
            if looked < BATCH:
                break
        self.aborted_uploads = self.abort_stale_uploads(self.upload_grace_s)
        return collected

    def abort_stale_uploads(self, grace_s: float = UPLOAD_GRACE_S) -> int:
        """Abort the store's multipart uploads under its prefix started more than
        ``grace_s`` ago; how many (a store without multipart uploads has none)."""
        abort: Callable[[float], int] | None = getattr(self.shared(), "abort_stale_uploads", None)
        try:
            return 0 if abort is None else abort(grace_s)
        except StoreError as exc:  # the store is down: the next collection tries again
            log.warning("could not abort stale multipart uploads: %s", exc)
            return 0

    def _collect_batch(self, skip: int) -> tuple[int, list[str]]:
        cutoff = redis_now(self.client) - self.run_ttl_s  # scores are Redis' time
        raw = self.client.zrangebyscore(self.keys.runs, "-inf", cutoff, start=skip, num=BATCH)
        ids = [item.decode() for item in raw]
        if not ids:
            return 0, []
        pipe = self.client.pipeline(transaction=False)
        for run_id in ids:
            pipe.exists(self.keys.run(run_id))
        gone = [run_id for run_id, alive in zip(ids, pipe.execute(), strict=True) if not alive]
        for run_id in gone:
            self.shared().delete_prefix(key_part("run id", run_id) + "/")
        if gone:
            pipe = self.client.pipeline(transaction=False)
            pipe.delete(*[key for run_id in gone for key in self.keys.run_keys(run_id)])
            pipe.zrem(self.keys.runs, *gone)
            pipe.srem(self.keys.active_runs, *gone)
            pipe.execute()
            log.info("collected %d expired run(s): %s", len(gone), ", ".join(gone[:10]))
        return len(ids), gone


class CacheSweeper:
    """Deletes the run directories of one local cache (and of this machine's RAM tier)
    whose runs Redis no longer knows."""

    def __init__(
        self,
        client: Redis[bytes],
        keys: RedisKeys,
        cache_root: Path | None,
        run_ttl_s: float,
        interval_s: float,
        ram_roots: Sequence[Path] = (),
        spares: SparePool | None = None,
    ) -> None:
        self.client = client
        self.keys = keys
        # Each root with the age from which its run directories are checked.
        ram_age = min(run_ttl_s, RAM_ORPHAN_S)
        self.roots = ([] if cache_root is None else [(cache_root, run_ttl_s)]) + [
            (root, ram_age) for root in ram_roots
        ]
        self.spares = spares
        self.run_ttl_s = run_ttl_s
        self.interval_s = interval_s
        self._due = 0.0
        self._lock = threading.Lock()

    def maybe_sweep(self) -> int:
        """Sweep if ``interval_s`` passed since the last sweep; directories deleted."""
        now = time.monotonic()
        with self._lock:
            if now < self._due:
                return 0
            self._due = now + self.interval_s
        return self.sweep()

    def sweep(self) -> int:
        """Delete every old run directory whose run is gone (how many were deleted),
        and partial files older than :data:`TEMP_GRACE_S`."""
        for root, _ in self.roots:
            sweep_temp_files(root)
            sweep_cache_copies(root / CACHE_RUN)
        if self.spares is not None:
            self.spares.trim()
        deleted = 0
        for batch in _batches(self._old_run_dirs(), BATCH):
            pipe = self.client.pipeline(transaction=False)
            for path in batch:
                pipe.exists(self.keys.run(unquote(path.name)))
            for path, alive in zip(batch, pipe.execute(), strict=True):
                if not alive:
                    shutil.rmtree(path, ignore_errors=True)
                    deleted += 1
        if deleted:
            log.info(
                "deleted %d expired run dir(s) from %s",
                deleted,
                ", ".join(str(root) for root, _ in self.roots),
            )
        return deleted

    def _old_run_dirs(self) -> Iterator[Path]:
        now = time.time()
        entries: list[tuple[Path, float]] = []
        for root, age in self.roots:
            try:
                entries += [(path, now - age) for path in root.iterdir()]
            except FileNotFoundError:
                continue
        for path, cutoff in entries:
            if path.name.startswith(".") or path.name == CACHE_RUN:  # not a run
                continue
            try:
                if path.is_dir() and path.stat().st_mtime < cutoff:
                    yield path
            except FileNotFoundError:
                continue


def _batches(items: Iterator[Path], size: int) -> Iterator[list[Path]]:
    batch: list[Path] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def cache_roots(cache_dir: Path, worker_ids: Sequence[str] = ()) -> list[Path]:
    """The worker caches under ``cache_dir`` on this machine (only ``worker_ids``'
    if given): one directory per worker id."""
    if worker_ids:
        return [cache_dir / key_part("worker id", worker_id) for worker_id in worker_ids]
    try:
        return sorted(path for path in cache_dir.iterdir() if path.is_dir())
    except FileNotFoundError:
        return []
