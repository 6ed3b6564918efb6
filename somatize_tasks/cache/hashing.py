"""Content hashes of values and the cache keys made of them, as Soma's ``CacheKey``.

A key is SHA-256 over length-prefixed parts, so ``("ab", "c")`` and
``("a", "bc")`` never meet. The two keys Soma defines:

- a **state** key, ``hash(config + x + y)``: what ``fit`` learned (labels are
  part of it: the same features against other labels must not collide);
- an **output** key, ``hash(config + state + input)``: what ``forward`` made.

With an experiment seed each key is salted with it, so every seed owns its
own cache line. Keys are built from the content hashes of the materialized
values, never from where they came from, so an upstream change whose output
is byte-for-byte the same still hits downstream (early cutoff).

:func:`value_hash` hashes a value by what it is, with a tag per kind: an
array by dtype, shape and bytes; JSON data by its canonical text (sorted
keys; NaN, infinities and ``-0.0`` kept apart, as Soma hashes floats by
their bits); bytes and text as they are. A value and its round trip through
the store hash alike (a tuple comes back a list, which is the same JSON), so
a node reading a value from memory and one reading it from the store compute
the same key.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from somatize_tasks.store.codecs import codec_for

Digest = str  # 64 hex characters


def combine(*parts: str | bytes) -> Digest:
    """SHA-256 over length-prefixed parts (Soma's ``CacheKey::from_parts``)."""
    hasher = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        hasher.update(len(data).to_bytes(8, "little"))
        hasher.update(data)
    return hasher.hexdigest()


def state_key(config: Digest, x: Digest, y: Digest | None, seed: int | None) -> Digest:
    """``hash(config + x [+ y])``, salted with the seed: what ``fit`` learns."""
    key = combine("state", config, x) if y is None else combine("state", config, x, "y", y)
    return salted(key, seed)


def output_key(config: Digest, state: Digest, input_: Digest, seed: int | None) -> Digest:
    """``hash(config + state + input)``, salted with the seed: what ``forward`` makes."""
    return salted(combine("output", config, state, input_), seed)


def salted(key: Digest, seed: int | None) -> Digest:
    """The key of ``seed``'s cache line; without a seed the key as it is."""
    return key if seed is None else combine("seed", str(int(seed)), key)


def mapping_hash(items: Mapping[str, Digest]) -> Digest:
    """An object of values known by their hashes (a node's several predecessors)."""
    parts: list[str] = ["map"]
    for name in sorted(items):
        parts += [name, items[name]]
    return combine(*parts)


def value_hash(value: Any) -> Digest:
    """The content hash of one value (see the module docstring)."""
    hasher = hashlib.sha256()
    _absorb(hasher, value)
    return hasher.hexdigest()


def _absorb(hasher: Any, value: Any) -> None:
    if isinstance(value, np.ndarray) and not value.dtype.hasobject:
        _absorb_array(hasher, value)
    elif isinstance(value, bytes | bytearray | memoryview):
        _tagged(hasher, b"B", bytes(value))
    elif isinstance(value, str):
        _tagged(hasher, b"T", value.encode("utf-8", "surrogatepass"))
    else:
        text = _canonical_json(value)
        if text is not None:
            _tagged(hasher, b"J", text.encode("utf-8", "surrogatepass"))
        elif isinstance(value, Mapping):
            _absorb_mapping(hasher, value)
        elif isinstance(value, Sequence):
            hasher.update(b"L" + len(value).to_bytes(8, "little"))
            for item in value:
                _absorb(hasher, item)
        else:
            _absorb_encoded(hasher, value)


def _absorb_array(hasher: Any, array: np.ndarray[Any, Any]) -> None:
    header = f"{array.dtype.str}{list(array.shape)}".encode()
    _tagged(hasher, b"A", header)
    hasher.update(np.ascontiguousarray(array).reshape(-1).view(np.uint8))


def _absorb_mapping(hasher: Any, value: Mapping[Any, Any]) -> None:
    hasher.update(b"M" + len(value).to_bytes(8, "little"))
    for key in sorted(value, key=str):
        _tagged(hasher, b"K", str(key).encode("utf-8", "surrogatepass"))
        _absorb(hasher, value[key])


def _absorb_encoded(hasher: Any, value: Any) -> None:
    """A value of a registered codec: its encoded bytes, under the codec's name."""
    codec = codec_for(value)
    buffer = io.BytesIO()
    codec.write(value, buffer)
    _tagged(hasher, b"C" + codec.name.encode(), buffer.getvalue())


def _tagged(hasher: Any, tag: bytes, data: bytes) -> None:
    hasher.update(tag + len(data).to_bytes(8, "little"))
    hasher.update(data)


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(type(value).__qualname__)


def _canonical_json(value: Any) -> str | None:
    """Sorted-key JSON text of ``value``, or None when it is not plain JSON data."""
    plain = value is None or isinstance(value, str | int | float | bool | list | dict | tuple)
    if not plain and not isinstance(value, np.generic):
        return None
    try:
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), default=_json_default, allow_nan=True
        )
    except (TypeError, ValueError):
        return None
