"""A Stream block: the input in chunks through a chain of nodes, as Soma's stream runner.

- Only a numeric array is cut into chunks of ``chunk_size`` rows along its
  first dimension: a NumPy array, or a list of numbers or of equally long
  numeric rows (what Soma holds as a tensor). Anything else is one chunk,
  and so is everything when ``chunk_size`` is 0 (Soma's ``chunk_value``).
- A node starts from the state the run holds for it, or from ``None``
  (Soma's ``Value::Empty``) when it was never fitted, whatever its mode.
- Each node keeps its stream mode: ``fixed_state`` forwards every chunk
  with its state; ``evolving`` takes each chunk's output as the state for
  the next chunk; ``barrier`` holds every chunk that reaches it and, at the
  flush, forwards them all at once (concatenated) and passes the result on.
- The outputs that reach the end are concatenated in order when they are
  arrays; when none is, the last one is the stream's output (Soma keeps the
  last non-tensor); when nothing reaches the end, the output is ``None``.

Lists stay lists and arrays stay arrays: a chunk of a list is a list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from numbers import Real
from typing import Any

import numpy as np

from somatize_tasks.catalog.entries import BoundNode
from somatize_tasks.errors import ControlFlowError
from somatize_tasks.runtime.compile.control import describe

_NOTHING: Any = object()


@dataclass
class _StreamNode:
    node_id: str
    bound: BoundNode
    state: Any
    held: list[Any] = field(default_factory=list)

    def compute(self, value: Any) -> Any:
        output = self.bound.forward(value, self.state)
        if self.bound.entry.stream_mode == "evolving":
            self.state = output
        return output

    @property
    def is_barrier(self) -> bool:
        return self.bound.entry.stream_mode == "barrier"


def run_stream(
    nodes: list[tuple[str, BoundNode]],
    value: Any,
    chunk_size: int,
    state_of: Callable[[str, BoundNode], Any],
) -> Any:
    """The stream's output for ``value``; ``state_of`` gives each node's fixed state."""
    chain = [_StreamNode(node_id, bound, state_of(node_id, bound)) for node_id, bound in nodes]
    outputs: list[Any] = []
    for chunk in split_rows(value, chunk_size):
        done = _push(chain, chunk)
        if done is not _NOTHING:
            outputs.append(done)
    flushed = _flush(chain)
    if flushed is not _NOTHING:
        outputs.append(flushed)
    return concatenate_outputs(outputs)


def _push(chain: list[_StreamNode], chunk: Any) -> Any:
    current = chunk
    for node in chain:
        if node.is_barrier:
            node.held.append(current)
            return _NOTHING
        current = node.compute(current)
    return current


def _flush(chain: list[_StreamNode]) -> Any:
    """Each barrier forwards what it held; the result cascades down the chain."""
    current: Any = _NOTHING
    for node in chain:
        if node.held:
            held, node.held = node.held, []
            current = node.compute(_concatenate_held(node.node_id, held))
        elif current is not _NOTHING:
            current = node.compute(current)
    return current


def is_numeric_array(value: Any) -> bool:
    """A NumPy array of numbers, or a non-empty list of numbers or numeric rows."""
    if isinstance(value, np.ndarray):
        return value.ndim >= 1 and value.size > 0 and value.dtype.kind in "biuf"
    if not isinstance(value, list) or not value:
        return False
    if all(_is_number(v) for v in value):
        return True
    width = len(value[0]) if isinstance(value[0], list) else -1
    return width > 0 and all(
        isinstance(row, list) and len(row) == width and all(_is_number(v) for v in row)
        for row in value
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def split_rows(value: Any, chunk_size: int) -> list[Any]:
    """``chunk_size`` rows at a time for a numeric array; anything else is one chunk,
    and a ``chunk_size`` of 0 is one chunk too."""
    if chunk_size <= 0 or not is_numeric_array(value):
        return [value]
    return [value[start : start + chunk_size] for start in range(0, len(value), chunk_size)]


def _concatenate_held(node_id: str, held: list[Any]) -> Any:
    if not all(is_numeric_array(h) for h in held):
        bad = next(h for h in held if not is_numeric_array(h))
        raise ControlFlowError(
            f"stream node '{node_id}' is a barrier and received {describe(bad)}; "
            "a barrier can only join numeric arrays"
        )
    return _join(held)


def concatenate_outputs(outputs: list[Any]) -> Any:
    """Arrays joined in order; otherwise the last output; ``None`` for none."""
    arrays = [o for o in outputs if is_numeric_array(o)]
    if arrays:
        return _join(arrays)
    return outputs[-1] if outputs else None


def _join(parts: list[Any]) -> Any:
    if all(isinstance(p, list) for p in parts):
        return [row for part in parts for row in part]
    return np.concatenate([np.asarray(p) for p in parts])
