"""``ArtifactRef``: the small, JSON-serialisable handle of one stored node output."""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from somatize_tasks.store.ids import artifact_key

TransferType = Literal["s3", "direct", "cached"]


class ArtifactRef(BaseModel):
    """Where a node's output is and how to decode it.

    ``attempt`` is the execution that wrote it (fencing: each attempt at a node has
    a key of its own, and only the recorded one is ever referenced); 0, left out of
    the JSON, for values written outside any attempt (a run's input) and by workers
    before fencing. ``inline`` carries the encoded value itself (base64) when it is at most
    ``Settings.inline_max_bytes``: such a value travels "direct", inside the
    message. ``worker_id`` is the worker whose local cache holds a copy.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    node_id: str
    iteration: Annotated[int, Field(ge=0)] = 0
    codec: str
    size: Annotated[int, Field(ge=0)]
    inline: str | None = None
    worker_id: str | None = None
    attempt: Annotated[int, Field(ge=0)] = 0

    @property
    def key(self) -> str:
        """The storage key under any store prefix (ids checked: never escapes it)."""
        return artifact_key(self.run_id, self.node_id, self.iteration, self.attempt)

    def as_json(self) -> dict[str, Any]:
        """The ref as it travels; ``attempt`` only when set, so an unfenced ref reads
        the same as before fencing."""
        found = self.model_dump(mode="json")
        if not self.attempt:
            del found["attempt"]
        return found

    def inline_bytes(self) -> bytes | None:
        return None if self.inline is None else base64.b64decode(self.inline)
