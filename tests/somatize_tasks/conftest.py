"""Fixtures of the store tests: a RAM directory of a test's own, and settings using it."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from somatize_tasks.settings import Settings

SHM = Path("/dev/shm")


@pytest.fixture
def ram_dir(tmp_path: Path) -> Iterator[Path]:
    """A RAM directory of this test's own (in /dev/shm where the machine has one)."""
    where = SHM / f"somatize-test-{uuid.uuid4().hex[:8]}" if SHM.is_dir() else tmp_path / "ram"
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def local(settings: Settings, tmp_path: Path, ram_dir: Path) -> Settings:
    return settings.model_copy(update={
        "store_kind": "local", "store_dir": tmp_path / "shared", "cache_dir": tmp_path / "cache",
        "ram_dir": ram_dir, "ram_max_bytes": 4 << 20,
    })  # fmt: skip
