"""Fixtures for the scheduler tests (builders live in helpers.py)."""

from __future__ import annotations

import pytest

from scheduler import WorkerInfo


@pytest.fixture
def seed_workers() -> list[WorkerInfo]:
    """The two workers of the Rust seed's tests."""
    return [
        WorkerInfo(
            id="w1",
            name="GPU-A100",
            tags=["gpu"],
            gpu=True,
            cpu_cores=16,
            active_jobs=0,
            max_concurrent=4,
        ),
        WorkerInfo(
            id="w2",
            name="CPU-Server",
            tags=["cpu"],
            gpu=False,
            cpu_cores=64,
            active_jobs=1,
            max_concurrent=8,
        ),
    ]
