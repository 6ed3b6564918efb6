"""Test-only catalog module loaded into test workers with ``--nodes``.

Besides a node, it registers tiny tasks the worker tests drive directly:
``somatize.node.test_sleep`` (named like a node task, so heartbeats count
it), ``somatize.test.sleep`` (not a node task: must not be counted) and
helpers that put and read artifacts in the worker's own store.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import numpy as np
from celery import Task, shared_task

from somatize_tasks.catalog.entries import node
from somatize_tasks.messaging.celery_app import settings_of
from somatize_tasks.store import ArtifactRef
from somatize_tasks.transfer import store_for


@node("test_triple")
def triple(value: Any) -> Any:
    return 3 * value


def make_array(size: int, seed: int) -> np.ndarray:
    """The deterministic array both sides of a transfer test compute."""
    return np.random.default_rng(seed).standard_normal(size)


def digest(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return hashlib.sha256(value.tobytes()).hexdigest() + str(value.dtype) + str(value.shape)
    return hashlib.sha256(repr(value).encode()).hexdigest()


@shared_task(name="somatize.node.test_sleep")
def node_sleep(seconds: float, fail: bool = False) -> float:
    time.sleep(seconds)
    if fail:
        raise RuntimeError("test_sleep failed on purpose")
    return seconds


@shared_task(name="somatize.test.sleep")
def plain_sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@shared_task(bind=True, name="somatize.test.put_array")
def put_array(
    self: Task[Any, Any], run_id: str, node_id: str, size: int, seed: int
) -> dict[str, Any]:
    store = store_for(settings_of(self.app))
    return store.put(run_id, node_id, 0, make_array(size, seed)).model_dump(mode="json")


@shared_task(bind=True, name="somatize.test.inspect")
def inspect_artifact(self: Task[Any, Any], ref: dict[str, Any]) -> dict[str, Any]:
    """Whether this worker's cache has the value, then its digest (reading it)."""
    store = store_for(settings_of(self.app))
    artifact = ArtifactRef.model_validate(ref)
    had_local = store.has_local(artifact)
    return {
        "had_local": had_local,
        "digest": digest(store.get(artifact)),
        "worker_id": store.worker_id,
    }
