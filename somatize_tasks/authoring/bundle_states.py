"""A node's state in a Soma checkpoint bundle: ``states/<id>.json`` and ``.safetensors``.

Soma's ``Graph.save`` splits a state in two: tensors go to a safetensors
file, everything else to a JSON file (``_split_state``); ``Graph.load``
merges them back (``_merge_state``). Soma merges tensors into a
``torch.save`` blob (``weights_b64``), which needs torch; here they stay
NumPy arrays, read with ``safetensors.numpy`` (no code runs on load):

- only JSON: the JSON value;
- only tensors: a dict of arrays by tensor name, or the bare array when
  the one tensor is named :data:`ARRAY_KEY` (how a bare array is written);
- both: the tensors' dict updated with the JSON object (its
  ``_extra_non_tensor`` entries, Soma's non-tensor parts of a weights dict,
  go in with the tensors).

Writing is the inverse: a JSON value to ``.json``; an array, or a dict
holding arrays, splits into ``.safetensors`` (the arrays) and ``.json``
(the rest, if any).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load as load_tensors
from safetensors.numpy import save as save_tensors

from scheduler.model.depth import MAX_JSON_DEPTH, text_too_deep
from somatize_tasks.errors import BundleError

#: The tensor name a bare array state is written under.
ARRAY_KEY = "__array__"
_EXTRA = "_extra_non_tensor"


def read_state(node_id: str, tensors: bytes | None, text: bytes | None) -> Any:
    """A node's state from its two files (either may be missing, not both)."""
    arrays = _read_tensors(node_id, tensors) if tensors is not None else {}
    rest = _read_json(node_id, text) if text is not None else None
    if not arrays:
        return rest
    if rest is None:
        return arrays[ARRAY_KEY] if set(arrays) == {ARRAY_KEY} else arrays
    if not isinstance(rest, dict):
        raise BundleError(
            f"node {node_id!r}: states/{node_id}.json must be an object when "
            f"states/{node_id}.safetensors is there too, not {type(rest).__name__}"
        )
    merged: dict[str, Any] = dict(arrays)
    extra = rest.pop(_EXTRA, None)
    if isinstance(extra, dict):
        merged.update(extra)
    merged.update(rest)
    return merged


def write_state(node_id: str, state: Any) -> tuple[bytes | None, str | None]:
    """A state as (safetensors bytes, JSON text); None where that file is not written."""
    if isinstance(state, np.ndarray):
        return _tensors(node_id, {ARRAY_KEY: state}), None
    if isinstance(state, dict) and any(isinstance(v, np.ndarray) for v in state.values()):
        arrays = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
        rest = {k: v for k, v in state.items() if not isinstance(v, np.ndarray)}
        return _tensors(node_id, arrays), (_json(node_id, rest) if rest else None)
    return None, _json(node_id, state)


def _read_tensors(node_id: str, data: bytes) -> dict[str, Any]:
    try:
        return dict(load_tensors(data))
    except (SafetensorError, ValueError, TypeError) as exc:
        raise BundleError(f"node {node_id!r}: states/{node_id}.safetensors: {exc}") from None


def _read_json(node_id: str, data: bytes) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BundleError(f"node {node_id!r}: states/{node_id}.json is not UTF-8: {exc}") from None
    if text_too_deep(text) is not None:
        raise BundleError(
            f"node {node_id!r}: states/{node_id}.json nests more than {MAX_JSON_DEPTH} levels"
        )
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BundleError(f"node {node_id!r}: states/{node_id}.json is not JSON: {exc}") from None


def _tensors(node_id: str, arrays: dict[str, Any]) -> bytes:
    bad = [k for k, v in arrays.items() if v.dtype.hasobject]
    if bad:
        raise BundleError(f"node {node_id!r}: state array {bad[0]!r} holds Python objects")
    try:
        return bytes(save_tensors({k: np.ascontiguousarray(v) for k, v in arrays.items()}))
    except (SafetensorError, ValueError, TypeError) as exc:
        raise BundleError(
            f"node {node_id!r}: its state cannot be written as safetensors: {exc}"
        ) from None


def _json(node_id: str, value: Any) -> str:
    try:
        return json.dumps(value, default=_plain)
    except (TypeError, ValueError) as exc:
        raise BundleError(
            f"node {node_id!r} has a state a bundle cannot hold (JSON, or NumPy arrays "
            f"alone or in a dict): {exc}"
        ) from None


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"a {type(value).__qualname__} is not JSON")
