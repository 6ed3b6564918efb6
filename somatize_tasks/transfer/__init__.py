"""Moving artifacts between workers: plain functions the transfer tasks call.

``upload_artifact`` runs on the worker that holds the value (it puts it in
the shared store unless it is there already); ``download_artifact`` runs on
the worker that needs it (it fills that worker's cache). Both return a
small JSON-ready dict, which is what the tasks return and what Flower shows.
"""

from __future__ import annotations

import threading
from typing import Any

from somatize_tasks.config.settings import Settings
from somatize_tasks.store import ArtifactRef, ArtifactStore

_stores: dict[tuple[int, str], ArtifactStore] = {}
_stores_lock = threading.Lock()


def store_for(settings: Settings, worker_id: str | None = None) -> ArtifactStore:
    """This process's store for a worker, built once (it holds the S3 connection pool)."""
    wid = worker_id or settings.worker_id
    with _stores_lock:
        store = _stores.get((id(settings), wid))
        if store is None:
            store = _stores[(id(settings), wid)] = ArtifactStore(settings, wid)
        return store


def upload_artifact(store: ArtifactStore, ref: ArtifactRef) -> dict[str, Any]:
    """Put ``ref``'s value in the shared store unless it is inline or already there."""
    transfer_type = store.upload(ref)
    moved = ref.size if transfer_type == "s3" else 0
    return {
        "transfer_type": transfer_type,
        "bytes": moved,
        "worker_id": store.worker_id,
        "key": ref.key,
    }


def download_artifact(store: ArtifactStore, ref: ArtifactRef) -> dict[str, Any]:
    """Fill this worker's cache with ``ref``'s value unless it is inline or already here."""
    if ref.inline is not None:
        return {"transfer_type": "direct", "bytes": 0, "worker_id": store.worker_id, "key": ref.key}
    had = store.has_local(ref)
    store.download(ref)
    return {
        "transfer_type": "cached" if had else "s3",
        "bytes": 0 if had else ref.size,
        "worker_id": store.worker_id,
        "key": ref.key,
    }
