"""A large JSON document in a run's meta, stored compressed.

A distribution carries a phase and a reason for every node: about 400 bytes
a node, almost all of it repeated text, which zlib takes down to a few
percent. What is stored is still JSON, only compressed (never pickle); a
value without the prefix (a run recorded before this) is read as it is.
"""

from __future__ import annotations

import zlib

PREFIX = b"zlib:"


def pack(text: str) -> bytes:
    return PREFIX + zlib.compress(text.encode("utf-8"), 6)


def unpack(raw: bytes) -> bytes:
    """The JSON text of a stored value, packed or not."""
    if raw.startswith(PREFIX):
        return zlib.decompress(raw[len(PREFIX) :])
    return raw
