"""The artifact store: node outputs in a worker-local cache and a shared store (S3, a dir)."""

from somatize_tasks.store.artifacts import ArtifactStore
from somatize_tasks.store.ids import CACHE_RUN, MAX_ID_LENGTH, artifact_key, key_part
from somatize_tasks.store.ref import ArtifactRef, TransferType
from somatize_tasks.store.shared import DirectoryStore, S3Store, SharedStore, shared_store

__all__ = [
    "CACHE_RUN",
    "MAX_ID_LENGTH",
    "ArtifactRef",
    "ArtifactStore",
    "DirectoryStore",
    "S3Store",
    "SharedStore",
    "TransferType",
    "artifact_key",
    "key_part",
    "shared_store",
]
