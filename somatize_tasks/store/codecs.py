"""How node outputs become bytes: JSON, NumPy ``.npy``/``.npz`` and bytes, plus registered codecs.

A codec writes a value to a binary file object and reads it back, so large
arrays stream to and from disk without a second in-memory copy. ``.npy``
is always written and read with ``allow_pickle=False``: an artifact can
never execute code when it is loaded; an array read from a file (not
inline) is memory-mapped read-only, so a large value is never copied. Codecs
are tried most specific first: registered codecs, then bytes, then NumPy
arrays, then dicts holding NumPy arrays (``npz``: the arrays, and the
other items as JSON beside them), then JSON.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from somatize_tasks.errors import CodecError


@dataclass(frozen=True)
class Codec:
    """A named way to write values of some types and read them back."""

    name: str
    accepts: Callable[[Any], bool]
    write: Callable[[Any, IO[bytes]], None]
    read: Callable[[IO[bytes]], Any]
    #: Read straight from a file without copying it into memory, where the codec can.
    read_file: Callable[[Path], Any] | None = None


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"Object of type {type(value).__qualname__} is not JSON serializable")


def _json_accepts(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool | list | dict | tuple)


def _write_json(value: Any, fh: IO[bytes]) -> None:
    try:
        text = json.dumps(value, default=_json_default, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise CodecError(f"cannot encode a {type(value).__qualname__} as JSON: {exc}") from None
    fh.write(text.encode())


def _read_json(fh: IO[bytes]) -> Any:
    return json.loads(fh.read())


def _npy_accepts(value: Any) -> bool:
    return isinstance(value, np.ndarray) and not value.dtype.hasobject


def _write_npy(value: Any, fh: IO[bytes]) -> None:
    np.save(fh, value, allow_pickle=False)


def _read_npy(fh: IO[bytes]) -> Any:
    return np.load(fh, allow_pickle=False)


def _map_npy(path: Path) -> Any:
    """A read-only memory map of the array: no copy, pages read as they are used."""
    return np.load(path, mmap_mode="r", allow_pickle=False)


#: The entry of an ``npz`` value holding its non-array items, as JSON text.
_NPZ_JSON = "__json__"


def _npz_accepts(value: Any) -> bool:
    """A dict of named arrays, maybe with JSON items beside them: a fitted state such as
    a Soma bundle's safetensors tensors with their JSON remainder."""
    return (
        isinstance(value, dict)
        and bool(value)
        and _NPZ_JSON not in value
        and all(isinstance(k, str) and k for k in value)
        and any(_npy_accepts(v) for v in value.values())
    )


def _write_npz(value: dict[str, Any], fh: IO[bytes]) -> None:
    arrays = {k: v for k, v in value.items() if _npy_accepts(v)}
    rest = {k: v for k, v in value.items() if not _npy_accepts(v)}
    if rest:
        buffer = io.BytesIO()
        _write_json(rest, buffer)
        arrays[_NPZ_JSON] = np.array(buffer.getvalue().decode())
    np.savez(fh, allow_pickle=False, **arrays)


def _read_npz(fh: IO[bytes]) -> Any:
    with np.load(fh, allow_pickle=False) as archive:
        value: dict[str, Any] = {name: archive[name] for name in archive.files}
    rest = value.pop(_NPZ_JSON, None)
    if rest is not None:
        value.update(json.loads(str(rest)))
    return value


def _bytes_accepts(value: Any) -> bool:
    return isinstance(value, bytes | bytearray | memoryview)


def _write_bytes(value: Any, fh: IO[bytes]) -> None:
    fh.write(value)


def _read_bytes(fh: IO[bytes]) -> Any:
    return fh.read()


JSON = Codec("json", _json_accepts, _write_json, _read_json)
NPY = Codec("npy", _npy_accepts, _write_npy, _read_npy, _map_npy)
NPZ = Codec("npz", _npz_accepts, _write_npz, _read_npz)
BYTES = Codec("bytes", _bytes_accepts, _write_bytes, _read_bytes)

_BUILTIN = (BYTES, NPY, NPZ, JSON)
_registered: list[Codec] = []


def register_codec(codec: Codec) -> Codec:
    """Add a codec for another type; it is tried before the built-in ones.

    Register it in a module both producer and workers import (a catalog
    module), or a value written with it cannot be read elsewhere.
    """
    if any(existing.name == codec.name for existing in (*_BUILTIN, *_registered)):
        raise CodecError(f"a codec named '{codec.name}' is already registered")
    _registered.insert(0, codec)
    return codec


def codec_for(value: Any) -> Codec:
    """The codec that will write ``value``; :class:`CodecError` names its type if none."""
    for codec in (*_registered, *_BUILTIN):
        if codec.accepts(value):
            return codec
    kind = type(value)
    detail = f" with dtype {value.dtype}" if isinstance(value, np.ndarray) else ""
    raise CodecError(
        f"no codec can encode a value of type {kind.__module__}.{kind.__qualname__}{detail}; "
        "return JSON data, a NumPy array (no object dtype) or bytes, "
        "or register a codec with somatize_tasks.store.codecs.register_codec"
    )


def codec_named(name: str) -> Codec:
    """The codec a stored value was written with; unknown names are an error."""
    for codec in (*_registered, *_BUILTIN):
        if codec.name == name:
            return codec
    known = ", ".join(codec.name for codec in (*_registered, *_BUILTIN))
    raise CodecError(f"unknown codec '{name}' (known: {known}); is its module imported here?")
