"""The content cache as a worker uses it: look a key up, store what a node computed.

Every worker on every host reads and writes the same records and values in
the shared store (:mod:`somatize_tasks.cache.records`), so one worker hits
what another computed. A hit moves no compute, only the value, and the value
is checked before it is used: it is decoded and its content hash compared
with the record's (a large value is read once, on the worker that takes the
hit, which then holds it for the run). A record that cannot be read, a value that is missing or
whose content does not match, a store that does not answer: each is a miss,
never a wrong value, and the recomputed value replaces the bad one. Storing
is best effort: a store that fails to take an entry never fails the node.
"""

from __future__ import annotations

import base64
import logging
import time
from dataclasses import dataclass
from typing import Any, Literal

from somatize_tasks.cache.backend import CacheBackend, cache_backend
from somatize_tasks.cache.hashing import Digest, value_hash
from somatize_tasks.cache.records import CacheRecord, record_key, value_key
from somatize_tasks.config.settings import Settings
from somatize_tasks.store import ArtifactRef, ArtifactStore

log = logging.getLogger(__name__)
Kind = Literal["state", "output"]


@dataclass(frozen=True)
class Hit:
    """A verified cache entry: its value, its record, and where the value is."""

    value: Any
    record: CacheRecord
    source: ArtifactRef


class ContentCache:
    """Lookups and stores for one worker, over its artifact store and the shared store.

    A run never refers to the cache's own keys: a hit is adopted as the node's
    output under the run's key (:meth:`ArtifactStore.adopt`, a link), and a
    computed output, stored for the run as always, is published to the cache
    from there (:meth:`ArtifactStore.publish`). So everything that reads a run's
    values reads them as it always has.
    """

    def __init__(self, artifacts: ArtifactStore, backend: CacheBackend) -> None:
        self.artifacts = artifacts
        self.backend = backend

    @classmethod
    def for_store(cls, settings: Settings, artifacts: ArtifactStore) -> ContentCache:
        return cls(artifacts, cache_backend(settings))

    def lookup(self, key: Digest) -> Hit | None:
        """The entry under ``key``, checked against its content hash; None: a miss."""
        try:
            raw = self.backend.read(record_key(key))
            if raw is None:
                return None
            record = CacheRecord.model_validate_json(raw)
            if record.key != key:
                raise ValueError(f"the record under {key} names {record.key}")
            source = record.ref()
            value = self.artifacts.get(source)
            if value_hash(value) != record.hash:
                self._drop_copy(source.key)
                raise ValueError(f"its value does not match its content hash {record.hash}")
        except Exception as exc:  # any failure to read an entry is a miss, never an error
            log.warning("cache entry %s is unusable (a miss): %s", key[:16], exc)
            return None
        self._touch(record)
        return Hit(value, record, source)

    def adopt(
        self,
        hit: Hit,
        run_id: str,
        node_id: str,
        iteration: int,
        *,
        shared: bool,
        attempt: int = 0,
    ) -> dict[str, Any]:
        """The hit as the node's output in the run, under this execution's ``attempt``
        (``shared``: uploaded at once, as a value that outlives its worker must be)."""
        ref = self.artifacts.adopt(hit.source, run_id, node_id, iteration, attempt)
        if shared and ref.inline is None:
            self.artifacts.upload(ref)
        return ref.as_json()

    def store(
        self,
        key: Digest,
        kind: Kind,
        content: Digest,
        stored: dict[str, Any],
        compute_s: float,
    ) -> bool:
        """Keep the value the run stored as ``stored`` (whose content hash is
        ``content``) under ``key``; False when the store could not take it."""
        try:
            ref = ArtifactRef.model_validate(stored)
            if ref.inline is None:
                self.artifacts.publish(ref, value_key(content))
            record = CacheRecord(
                key=key,
                kind=kind,
                hash=content,
                codec=ref.codec,
                size=ref.size,
                inline=ref.inline,
                compute_s=compute_s,
                node_id=ref.node_id,
                run_id=ref.run_id,
            )
            self.backend.write(record_key(key), record.model_dump_json().encode())
        except Exception as exc:  # best effort, as Soma's store_output
            log.warning(
                "could not cache %s (run %s): %s", stored.get("node_id"), stored.get("run_id"), exc
            )
            return False
        return True

    def _touch(self, record: CacheRecord) -> None:
        """Count the hit and when it was (recency is half of eviction's rule)."""
        touched = record.model_copy(update={"accessed_at": time.time(), "hits": record.hits + 1})
        try:
            self.backend.write(record_key(record.key), touched.model_dump_json().encode())
        except Exception as exc:
            log.info("could not record a hit of %s: %s", record.key[:16], exc)

    def _drop_copy(self, artifact_key: str) -> None:
        """A corrupt local copy must not be read again: the next read fetches it anew."""
        self.artifacts.cache.path_for(artifact_key).unlink(missing_ok=True)


def inline_value_size(record: CacheRecord) -> int:
    """Bytes a record's inline value takes (0 for a value in the shared store)."""
    return 0 if record.inline is None else len(base64.b64decode(record.inline))
