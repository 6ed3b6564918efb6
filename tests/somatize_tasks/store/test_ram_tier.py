"""The RAM tier of a shared directory: values in tmpfs, bounded, and gone with their run."""

from __future__ import annotations

import errno
import os
import uuid
from pathlib import Path
from typing import IO

import numpy as np
import pytest

from somatize_tasks.config.settings import Settings
from somatize_tasks.store import ArtifactStore, shared_store
from somatize_tasks.store.ram import RamTier, ram_tier


def run_id() -> str:
    return f"run-{uuid.uuid4().hex[:8]}"


def disk_files(settings: Settings) -> list[Path]:
    return [
        p
        for root in (settings.store_dir, settings.cache_dir)
        if root.exists()
        for p in root.rglob("*")
        if p.is_file()
    ]


def test_a_large_value_crosses_workers_through_ram_and_touches_no_disk(local: Settings) -> None:
    source, target = ArtifactStore(local, "ram-a"), ArtifactStore(local, "ram-b")
    value = np.arange(200_000, dtype=np.float64)  # 1.6 MB
    ref = source.put(run_id(), "big", 0, value)
    assert ref.inline is None and source.ram is not None
    assert source.ram.path(ref.key, ref.size) is not None
    assert disk_files(local) == []
    assert target.has_local(ref) and target.upload(ref) == "cached"  # no transfer needed
    read = target.get(ref)
    assert np.array_equal(read, value)
    assert isinstance(read, np.memmap) and not read.flags.writeable
    assert shared_store(local).exists(ref.key, ref.size)  # the reaper sees it as shared


def test_over_the_budget_a_value_goes_to_disk(local: Settings) -> None:
    source, target = ArtifactStore(local, "ram-a"), ArtifactStore(local, "ram-b")
    run = run_id()
    first = source.put(run, "first", 0, np.zeros(3 << 20, dtype=np.uint8))  # 3 of 4 MiB
    second = source.put(run, "second", 0, np.ones(2 << 20, dtype=np.uint8))  # over budget
    assert source.ram is not None
    assert source.ram.path(first.key, first.size) is not None
    assert source.ram.path(second.key, second.size) is None
    assert (local.store_dir / second.key).stat().st_size == second.size  # the disk path
    assert int(target.get(second).sum()) == 2 << 20
    too_big = source.put(run, "huge", 0, b"x" * (5 << 20))  # larger than the whole budget
    assert source.ram.path(too_big.key, too_big.size) is None and target.get(too_big)[:1] == b"x"


def test_a_file_system_short_of_room_falls_back_to_disk(
    local: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container's small /dev/shm, nearly full (statvfs faked: it cannot be filled here)."""
    real = os.statvfs

    class Full:
        f_frsize, f_blocks, f_bavail = 4096, 16_384, 1_000  # 64 MiB, 4 MB free

    ram = str(local.ram_dir)
    monkeypatch.setattr(
        os, "statvfs", lambda path: Full() if str(path).startswith(ram) else real(path)
    )
    store = ArtifactStore(local, "ram-a")
    ref = store.put(run_id(), "big", 0, np.ones(1 << 20, dtype=np.uint8))
    assert store.ram is not None and store.ram.path(ref.key, ref.size) is None
    assert (local.store_dir / ref.key).is_file()


def test_a_write_that_runs_out_of_room_leaves_nothing_and_says_so(ram_dir: Path) -> None:
    tier = RamTier(ram_dir, 1 << 20)

    def writer(fh: IO[bytes]) -> None:
        fh.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    assert tier.write("r/n/0", 100, writer) is None
    assert [p for p in ram_dir.rglob("*") if p.is_file()] == []


def test_delete_run_and_the_shared_store_remove_ram_copies(local: Settings) -> None:
    store = ArtifactStore(local, "ram-a")
    kept, gone = run_id(), run_id()
    refs = [store.put(r, "big", 0, np.ones(100_000, dtype=np.uint8)) for r in (kept, gone)]
    store.delete_run(gone)
    assert store.ram is not None
    assert store.ram.path(refs[1].key, refs[1].size) is None
    assert store.ram.path(refs[0].key, refs[0].size) is not None
    shared_store(local).delete_prefix(f"{kept}/")  # what the run collector calls
    assert not shared_store(local).exists(refs[0].key, refs[0].size)


def test_the_tier_is_only_for_a_shared_directory_and_can_be_turned_off(
    local: Settings,
) -> None:
    assert ram_tier(local) is not None
    assert ram_tier(local.model_copy(update={"ram_max_bytes": 0})) is None
    assert ram_tier(local.model_copy(update={"store_kind": "s3"})) is None  # other machines
    assert ram_tier(local).root == local.ram_dir / local.key_prefix  # type: ignore[union-attr]
