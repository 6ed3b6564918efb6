"""Where the content cache keeps things in the shared store, and what a record says.

The layout follows Soma's action cache / content store split, under the
store's prefix (an S3 bucket's prefix, or the shared directory)::

    __cache__/actions/<k[:2]>/<key>.json   one record per cache key (JSON)
    __cache__/<value hash>/0               a value, by its content hash
    __cache__/pins/<name>                  a pinned key: never evicted

A value is shared by every record that produced the same content. A value
small enough to ride inline (``SOMATIZE_INLINE_MAX_BYTES``) lives in its
record and nowhere else. The value is written first and its record last, so
a record never names a value that was not there (a crash in between leaves a
value without a record, which ``cache gc`` deletes).
"""

from __future__ import annotations

import time
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from somatize_tasks.cache.hashing import Digest
from somatize_tasks.store import CACHE_RUN, ArtifactRef, artifact_key

ACTIONS = f"{CACHE_RUN}/actions/"
PINS = f"{CACHE_RUN}/pins/"
SECONDS_PER_DAY = 86_400.0


def record_key(key: Digest) -> str:
    return f"{ACTIONS}{key[:2]}/{key}.json"


def value_key(value_hash: Digest) -> str:
    return artifact_key(CACHE_RUN, value_hash, 0)


def pin_key(name: str) -> str:
    return f"{PINS}{name}"


class CacheRecord(BaseModel):
    """One cached computation: which value it produced, what it cost, who used it."""

    model_config = ConfigDict(extra="ignore")

    key: str
    kind: Literal["state", "output"]
    #: The content hash of the value (somatize_tasks.cache.hashing.value_hash).
    hash: str
    codec: str
    size: Annotated[int, Field(ge=0)]
    inline: str | None = None
    compute_s: Annotated[float, Field(ge=0)] = 0.0
    created_at: float = Field(default_factory=time.time)
    accessed_at: float = Field(default_factory=time.time)
    hits: Annotated[int, Field(ge=0)] = 0
    node_id: str = ""
    run_id: str = ""

    def ref(self) -> ArtifactRef:
        """The value as an artifact any worker can read (inline, or from the shared store)."""
        return ArtifactRef(
            run_id=CACHE_RUN,
            node_id=self.hash,
            codec=self.codec,
            size=self.size,
            inline=self.inline,
        )

    def density(self, now: float, size: int) -> float:
        """Soma's value density: ``(compute ms + 1) x recency / size``, where recency
        is ``1 / (1 + days since last used)``. Lowest is evicted first."""
        age_days = max(0.0, now - self.accessed_at) / SECONDS_PER_DAY
        return (self.compute_s * 1000.0 + 1.0) / (1.0 + age_days) / max(1, size)
