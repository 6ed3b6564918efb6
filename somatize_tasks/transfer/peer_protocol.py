"""The direct-transfer protocol: one value per TCP connection, plain and small.

Request, reader to holder: one line of JSON (at most :data:`LINE_MAX` bytes)
naming the value and carrying a grant for it (:mod:`~somatize_tasks.transfer.grants`)::

    {"v": 1, "run": ..., "node": ..., "iteration": 0, "attempt": 2, "size": N, "grant": "..."}\\n

Reply: one line of JSON, ``{"ok": true, "size": N}`` or ``{"ok": false,
"refused": true|false, "error": "..."}`` (then the holder closes); after an
``ok``, exactly ``N`` bytes of the value, then a trailer of :data:`TRAILER`
bytes: the SHA-256 of those bytes and the holder's tag over grant and digest.
The reader streams the bytes into its cache as they come (memory stays one
chunk on each side) and keeps the file only when size, digest and tag hold.
"""

from __future__ import annotations

import io
import json
from typing import IO, Any

from somatize_tasks.errors import GrantRefusedError, PeerTransferError
from somatize_tasks.store.ref import ArtifactRef

VERSION = 1
#: A request or reply line is refused past this many bytes.
LINE_MAX = 4096
#: SHA-256 of the value (32 bytes), then the holder's tag (32 bytes).
TRAILER = 64
#: Bytes moved per read or hash step: what either side holds of a value at a time.
CHUNK = 1 << 20


def request_line(ref: ArtifactRef, grant: str) -> bytes:
    """What a reader sends to pull ``ref``'s value."""
    fields = {
        "v": VERSION,
        "run": ref.run_id,
        "node": ref.node_id,
        "iteration": ref.iteration,
        "attempt": ref.attempt,
        "size": ref.size,
        "grant": grant,
    }
    return json.dumps(fields, separators=(",", ":")).encode() + b"\n"


def reply_line(ok: bool, *, size: int = 0, error: str = "", refused: bool = False) -> bytes:
    """What a holder answers before the value (or instead of it)."""
    fields: dict[str, Any] = {"ok": True, "size": size} if ok else {"ok": False, "error": error}
    if not ok:
        fields["refused"] = refused
    return json.dumps(fields, separators=(",", ":")).encode() + b"\n"


def read_line(stream: IO[bytes] | io.BufferedIOBase, what: str) -> dict[str, Any]:
    """One JSON line from ``stream`` (a :class:`GrantRefusedError` for a request that
    is not one, a :class:`PeerTransferError` for a reply)."""
    error = GrantRefusedError if what == "request" else PeerTransferError
    line = stream.readline(LINE_MAX + 1)
    if not line.endswith(b"\n"):
        too_long = len(line) > LINE_MAX
        raise error(f"{what} {'too long' if too_long else 'cut short'}")
    try:
        found = json.loads(line)
    except ValueError:
        raise error(f"{what} is not JSON") from None
    if not isinstance(found, dict):
        raise error(f"{what} is not a JSON object")
    return found


def requested(fields: dict[str, Any]) -> tuple[str, str, int, int, int, str]:
    """A request's ``(run, node, iteration, attempt, size, grant)``, types checked."""
    if fields.get("v") != VERSION:
        raise GrantRefusedError(f"protocol version {fields.get('v')!r}; this worker speaks 1")
    run_id, node_id, grant = fields.get("run"), fields.get("node"), fields.get("grant")
    numbers = [fields.get(name) for name in ("iteration", "attempt", "size")]
    if not (isinstance(run_id, str) and isinstance(node_id, str) and isinstance(grant, str)):
        raise GrantRefusedError("a request needs run, node and grant as strings")
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in numbers):
        raise GrantRefusedError("a request needs iteration, attempt and size as whole numbers")
    iteration, attempt, size = (int(n) for n in numbers)  # type: ignore[arg-type]
    return run_id, node_id, iteration, attempt, size, grant
