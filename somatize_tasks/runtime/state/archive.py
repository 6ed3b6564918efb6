"""A finished run's two logs, folded into its meta hash, compressed (and its plan).

Why: a run's history (each attempt's start and end, :mod:`somatize_tasks.runtime.state.history`)
and its transfer records are append-only lists of JSON lines, one or two a node
at ~100 bytes each plus Redis' own overhead per element: nearly half of what a
finished run kept (issue #10's goal is under 1 KB a node). They are only ever
read whole (the run's status, the timeline), and the lines repeat the same keys,
worker names and leading digits of times, so zlib takes them down about tenfold.
The process that ends a run folds each list into one field of the run's meta
hash (:data:`FIELDS`) and deletes the list; the field expires with the meta.
In the same step it compresses the meta's per-node JSON fields (:data:`PACKED`:
the plan, its node ids, ...) as the distribution always is
(:mod:`somatize_tasks.runtime.state.packing`; their readers ``unpack`` them).

A line may still come after the fold: a node that was running when the run was
cancelled records its failure. It lands in a new list (every writer of these
lists after a run's end sets the run's TTL) and readers take the archived lines
and the list in one transaction, archived first. The fold WATCHes what it reads,
so a line pushed meanwhile is never lost; it is best effort: one that fails
leaves the lists as they were, only larger.
"""

from __future__ import annotations

import logging
import zlib
from typing import Any

from redis import Redis
from redis.exceptions import RedisError, WatchError

from somatize_tasks.runtime.state.packing import PREFIX, pack

log = logging.getLogger(__name__)

#: The list each meta field holds once the run has ended (``<p>:run:<id>:<part>``).
FIELDS = {"history": "history_z", "transfers": "transfers_z"}
#: Meta fields of a node or more each, read seldom and whole: compressed once the run ends.
PACKED = ("plan", "node_ids", "params", "fused", "predecessors", "labels")
_PACK_OVER = 64  # bytes: a shorter value ("{}", "[]") would only grow
#: zlib's level: 3 packs a 10,000-node fork-join's two logs (20,000 history lines,
#: 10,000 transfers) in ~9 ms to ~22 bytes a node; 6 takes ~25 ms for ~18.
_LEVEL = 3


def pack_lines(lines: list[bytes]) -> bytes:
    """JSON lines (none holds a raw newline), joined and compressed."""
    return zlib.compress(b"\n".join(lines), _LEVEL)


def unpack_lines(raw: bytes | None) -> list[bytes]:
    return zlib.decompress(raw).split(b"\n") if raw else []


def log_lines(archived: bytes | None, live: list[bytes]) -> list[bytes]:
    """A log's lines in order: those folded at the run's end, then any pushed since."""
    return [*unpack_lines(archived), *live]


def fold_logs(client: Redis[bytes], meta: str, lists: dict[str, str], tries: int = 5) -> int:
    """Fold each list (meta field -> list key) into its meta field; lines folded.

    Call only once the run has ended (nothing but a late failure appends then)."""
    try:
        with client.pipeline() as pipe:
            for _ in range(tries):
                try:
                    return _fold(pipe, meta, lists)
                except WatchError:  # a line came meanwhile: read again
                    continue
    except RedisError as exc:
        log.warning("could not fold the logs of %s: %s", meta, exc)
    return 0


def _fold(pipe: Any, meta: str, lists: dict[str, str]) -> int:
    """One optimistic try: WATCH, read, then write in MULTI (``pipe`` is redis-py's
    pipeline; its commands answer at once between WATCH and MULTI)."""
    fields = list(lists)
    pipe.watch(meta, *lists.values())
    found: list[bytes | None] = pipe.hmget(meta, [*fields, *PACKED])
    live: list[list[bytes]] = [pipe.lrange(lists[f], 0, -1) for f in fields]
    archived, plain = found[: len(fields)], found[len(fields) :]
    folded = {
        f: pack_lines([*unpack_lines(old), *new])
        for f, old, new in zip(fields, archived, live, strict=True)
        if new
    }
    packed = {
        f: pack(raw.decode())
        for f, raw in zip(PACKED, plain, strict=True)
        if raw and len(raw) > _PACK_OVER and not raw.startswith(PREFIX)
    }
    pipe.multi()
    if folded or packed:
        pipe.hset(meta, mapping={**folded, **packed})
    if folded:
        pipe.delete(*[lists[f] for f in folded])
    pipe.execute()
    return sum(len(lines) for lines in live)
