"""Spare RAM files: a forgotten value's pages reused in place, never under a reader."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO

import numpy as np
import pytest
from redis import Redis

from somatize_tasks.config.keys import RedisKeys
from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import ArtifactMissingError
from somatize_tasks.store import ArtifactStore
from somatize_tasks.store.artifacts import _read_ram
from somatize_tasks.store.codecs import codec_named
from somatize_tasks.store.gc import RAM_ORPHAN_S, CacheSweeper
from somatize_tasks.store.ram import RamTier
from somatize_tasks.store.ref import ArtifactRef
from somatize_tasks.store.spares import IDLE_S, SPARE_DIR
from tests.conftest import needs_leases

MIB = 1 << 20
pytestmark = needs_leases


def save(value: np.ndarray) -> tuple[int, Callable[[IO[bytes]], None]]:
    def writer(fh: IO[bytes]) -> None:
        np.save(fh, value, allow_pickle=False)

    return value.nbytes + 128, writer


def write(tier: RamTier, run: str, value: np.ndarray) -> Path:
    size, writer = save(value)
    assert tier.write(f"{run}/n/0", size, writer) is not None
    path = tier.path(f"{run}/n/0", (tier.root / run / "n" / "0").stat().st_size)
    assert path is not None
    return path


def spares(tier: RamTier) -> list[Path]:
    where = tier.root / SPARE_DIR
    return sorted(where.iterdir()) if where.exists() else []


def test_a_deleted_value_file_is_overwritten_in_place_by_the_next_value(ram_dir: Path) -> None:
    tier = RamTier(ram_dir, 64 * MIB)
    first = write(tier, "r1", np.ones(3 * MIB // 2, dtype=np.uint8))
    inode = first.stat().st_ino
    tier.delete_prefix("r1/")
    assert not first.exists() and len(spares(tier)) == 1
    assert RamTier(ram_dir, 64 * MIB).used_bytes() == 0  # a spare is not a value

    value = np.arange(MIB // 8, dtype=np.int64)  # 1 MiB: smaller, so the file is cut down
    second = write(tier, "r2", value)
    assert second.stat().st_ino == inode and spares(tier) == []
    assert second.stat().st_size == value.nbytes + 128
    assert np.array_equal(np.load(second), value)


def test_a_mapped_value_is_deleted_not_recycled_and_its_reader_keeps_its_bytes(
    ram_dir: Path,
) -> None:
    tier = RamTier(ram_dir, 64 * MIB)
    path = write(tier, "r1", np.full(MIB, 7, dtype=np.uint8))
    reader = subprocess.Popen(  # another process maps it, as a worker or a producer does
        [
            sys.executable,
            "-c",
            "import numpy as np, sys; a = np.load(sys.argv[1], "
            "mmap_mode='r'); print('mapped', flush=True); sys.stdin.readline(); "
            "print(int(a.sum()), flush=True)",
            str(path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout is not None and reader.stdin is not None
        assert reader.stdout.readline().strip() == "mapped"
        tier.delete_prefix("r1/")
        assert spares(tier) == [] and not path.exists()  # in use: unlinked instead
        write(tier, "r2", np.zeros(MIB, dtype=np.uint8))  # fresh pages, nothing reused
        reader.stdin.write("\n")
        reader.stdin.flush()
        assert reader.stdout.readline().strip() == str(7 * MIB)
    finally:
        reader.kill()
        reader.wait()


def test_a_spare_far_from_the_values_size_is_left_for_a_better_fit(ram_dir: Path) -> None:
    tier = RamTier(ram_dir, 64 * MIB)
    write(tier, "big", np.ones(8 * MIB, dtype=np.uint8))
    tier.delete_prefix("big/")
    small = write(tier, "small", np.ones(MIB, dtype=np.uint8))
    assert len(spares(tier)) == 1 and small.stat().st_ino != spares(tier)[0].stat().st_ino
    reused = spares(tier)[0].stat().st_ino
    assert write(tier, "big2", np.ones(6 * MIB, dtype=np.uint8)).stat().st_ino == reused


def test_spares_keep_to_a_quarter_of_the_budget_and_go_when_idle(ram_dir: Path) -> None:
    tier = RamTier(ram_dir, 4 * MIB)  # spares: at most 1 MiB
    for node in ("a", "b", "c"):
        size, writer = save(np.ones(600_000, dtype=np.uint8))
        tier.write(f"r1/{node}/0", size, writer)
    tier.delete_prefix("r1/")
    assert len(spares(tier)) == 1 and not (ram_dir / "r1").exists()
    assert tier.spares.trim() == 0  # not idle yet
    assert tier.spares.trim(idle_s=0) == 1 and spares(tier) == []


def test_the_cache_sweep_trims_spares_and_never_takes_them_for_a_run(
    settings: Settings, ram_dir: Path, tmp_path: Path
) -> None:
    tier = RamTier(ram_dir, 64 * MIB)
    write(tier, "gone-run", np.ones(MIB, dtype=np.uint8))
    tier.delete_prefix("gone-run/")
    write(tier, "expired-run", np.ones(4 * MIB, dtype=np.uint8))  # too large to take it
    sweeper = CacheSweeper(
        Redis.from_url(settings.redis_url),
        RedisKeys(settings.key_prefix),
        tmp_path / "cache",
        0,
        0,
        ram_roots=[tier.root],
        spares=tier.spares,
    )
    assert sweeper.sweep() == 1  # the expired run's directory, not the spares'
    assert len(spares(tier)) == 1
    idle = time.time() - IDLE_S - 1
    os.utime(spares(tier)[0], (idle, idle))
    sweeper.sweep()
    assert spares(tier) == []


def test_a_reader_whose_file_was_replaced_meanwhile_says_so(local: Settings) -> None:
    store = ArtifactStore(local, "ram-a")
    ref = store.put(f"run-{uuid.uuid4().hex[:8]}", "big", 0, np.ones(MIB, dtype=np.uint8))
    assert store.ram is not None
    path = store.ram.path(ref.key, ref.size)
    assert path is not None
    npy = codec_named("npy")

    def replaced_while_read(where: Path) -> object:
        value = np.load(where, mmap_mode="r")
        np.save(where.with_name("again.npy"), np.zeros(MIB, dtype=np.uint8))
        os.replace(where.with_name("again.npy"), where)  # the path still exists
        return value

    racing = type(npy)(**{**npy.__dict__, "read_file": replaced_while_read})
    with pytest.raises(ArtifactMissingError, match=r"node 'big' \(run 'run-.*'\) was moved or"):
        _read_ram(path, racing, ArtifactRef.model_validate(ref.model_dump()))


def test_a_gone_runs_ram_directory_goes_after_minutes_its_cache_after_the_ttl(
    settings: Settings, ram_dir: Path, tmp_path: Path
) -> None:
    """Say a node finished after its run was cancelled and forgotten: what it wrote
    must not hold RAM for the week a cache directory may wait."""
    week = 7 * 24 * 3600
    old, recent = time.time() - RAM_ORPHAN_S - 60, time.time() - RAM_ORPHAN_S + 60
    ram_old, ram_recent, cache_old = ram_dir / "run-a", ram_dir / "run-b", tmp_path / "run-c"
    for path, at in ((ram_old, old), (ram_recent, recent), (cache_old, old)):
        (path / "n").mkdir(parents=True)
        (path / "n" / "0").write_bytes(b"x" * 1000)
        os.utime(path, (at, at))
    sweeper = CacheSweeper(
        Redis.from_url(settings.redis_url),
        RedisKeys(settings.key_prefix),
        tmp_path,
        week,
        0,
        ram_roots=[ram_dir],
    )
    assert sweeper.sweep() == 1
    assert not ram_old.exists() and ram_recent.exists() and cache_old.exists()


def test_a_file_with_a_second_name_is_never_recycled(ram_dir: Path) -> None:
    tier = RamTier(ram_dir, 64 * MIB)
    path = write(tier, "r1", np.ones(MIB, dtype=np.uint8))
    os.link(path, ram_dir / "other-name")  # a cache's hard link, say: readable there
    tier.delete_prefix("r1/")
    assert spares(tier) == [] and int(np.load(ram_dir / "other-name").sum()) == MIB


def test_a_file_written_again_between_the_lease_and_the_move_is_not_kept(
    ram_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tier = RamTier(ram_dir, 64 * MIB)
    path = write(tier, "r1", np.ones(MIB, dtype=np.uint8))
    newer = ram_dir / "newer"
    np.save(newer, np.zeros(MIB, dtype=np.uint8))
    real_utime = os.utime

    def rewritten_meanwhile(target: int | Path, *args: object) -> None:
        os.replace(f"{newer}.npy", path)  # the same key written again, by a late task
        real_utime(target)

    monkeypatch.setattr(os, "utime", rewritten_meanwhile)
    assert tier.spares.keep(path, path.stat().st_size) is False
    assert spares(tier) == []


def test_a_reader_that_opens_a_file_while_it_is_taken_as_a_spare_says_so(
    local: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real open that waits on the lease: the kernel lets it finish once the file is
    moved, so the reader must see that its path now leads elsewhere, and the file must
    not be kept, as the reader maps it."""
    store = ArtifactStore(local, "ram-a")
    ref = store.put("run-read", "big", 0, np.full(MIB // 2, 3, dtype=np.uint8))  # fits the spares
    reader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _READER,
            str(local.ram_dir),
            local.key_prefix,
            ref.model_dump_json(),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert reader.stdout is not None and reader.stdin is not None
    assert reader.stdout.readline().strip() == "ready"
    real_utime, told = os.utime, []

    def reader_opens_meanwhile(target: int | Path, *args: object) -> None:
        told.append(target)
        reader.stdin.write("go\n")  # type: ignore[union-attr]
        reader.stdin.flush()  # type: ignore[union-attr]
        time.sleep(0.5)  # it is waiting on the lease now
        real_utime(target)

    monkeypatch.setattr(os, "utime", reader_opens_meanwhile)
    try:
        assert store.ram is not None
        store.ram.delete_prefix("run-read/")
        assert told, "the file was never leased"
        assert reader.stdout.readline().strip() == "ArtifactMissingError"
        assert spares(store.ram) == []
    finally:
        reader.kill()
        reader.wait()


_READER = """
import sys
from pathlib import Path
from somatize_tasks.errors import ArtifactMissingError
from somatize_tasks.config.settings import Settings
from somatize_tasks.store import ArtifactRef, ArtifactStore
settings = Settings(store_kind="local", ram_dir=Path(sys.argv[1]), key_prefix=sys.argv[2])
store, ref = ArtifactStore(settings, "reader"), ArtifactRef.model_validate_json(sys.argv[3])
print("ready", flush=True)
sys.stdin.readline()
try:
    print(int(store.get(ref).sum()), flush=True)
except ArtifactMissingError:
    print("ArtifactMissingError", flush=True)
"""
