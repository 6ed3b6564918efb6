"""A large JSON document in a run's meta, stored compressed.

A distribution carries a phase and a reason for every node: about 400 bytes
a node, almost all of it repeated text, which zlib takes down to a few
percent. What is stored is still JSON, only compressed (never pickle); a
value without the prefix (a run recorded before this) is read as it is.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator

from pydantic import TypeAdapter

from scheduler import Assignment, DistributionPlan

PREFIX = b"zlib:"


def pack(text: str | bytes) -> bytes:
    """``text`` (JSON, as text or as its UTF-8 bytes) compressed, with the prefix."""
    raw = text.encode("utf-8") if isinstance(text, str) else text
    return PREFIX + zlib.compress(raw, 6)


def unpack(raw: bytes) -> bytes:
    """The JSON text of a stored value, packed or not."""
    if raw.startswith(PREFIX):
        return zlib.decompress(raw[len(PREFIX) :])
    return raw


def pack_pieces(pieces: Iterable[bytes]) -> bytes:
    """:func:`pack` of the JSON that ``pieces`` make up together, compressed as they
    come: the whole text is never held at once (a 200,000-node distribution is
    80 MB of JSON, 2 MB packed)."""
    compressor = zlib.compressobj(6)
    out = [PREFIX, *(compressor.compress(piece) for piece in pieces), compressor.flush()]
    return b"".join(out)


#: Assignments encoded at a time by :func:`distribution_json`.
ASSIGNMENTS_AT_ONCE = 10_000
_ASSIGNMENTS = TypeAdapter(list[Assignment])


def distribution_json(distribution: DistributionPlan) -> Iterator[bytes]:
    """The distribution's JSON in pieces, its assignments a slice at a time (as
    ``model_dump_json`` writes it, without ever holding all of it)."""
    rest = distribution.model_copy(update={"assignments": []})
    text = rest.__pydantic_serializer__.to_json(rest)
    head, empty, tail = text.partition(b'"assignments":[]')
    if not empty:  # not the shape expected: the plain way
        yield distribution.__pydantic_serializer__.to_json(distribution)
        return
    yield head + b'"assignments":['
    items = distribution.assignments
    for start in range(0, len(items), ASSIGNMENTS_AT_ONCE):
        chunk = _ASSIGNMENTS.dump_json(items[start : start + ASSIGNMENTS_AT_ONCE])[1:-1]
        yield (b"," if start else b"") + chunk
    yield b"]" + tail
