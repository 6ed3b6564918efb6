"""Running one task block's nodes where it landed: the body of a node task.

Plain functions over a :class:`ValueStore` and a catalog, so the Celery
task (:mod:`somatize_tasks.runtime.tasks`) and the local runner share them.
The catalog is the allowlist: a node runs only if the worker's catalog
holds an entry for it, found by :meth:`Program.op_candidates`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from scheduler import Branch, Step, Stream
from somatize_tasks.catalog import Catalog, CatalogEntry, call_node
from somatize_tasks.errors import UnknownNodeError
from somatize_tasks.runtime.program import Block, Program
from somatize_tasks.runtime.signals import (
    ControlFlowError,
    Handoff,
    branch_label,
    handoff_target,
    loop_should_stop,
)
from somatize_tasks.runtime.state import LeafResult
from somatize_tasks.runtime.values import Expr, materialize, ref_expr


class ValueStore(Protocol):
    """Where node outputs go: the artifact store, or memory for local runs."""

    def put_value(self, run_id: str, node_id: str, epoch: int, value: Any) -> dict[str, Any]: ...

    def get_value(self, ref: dict[str, Any]) -> Any: ...


def resolve_entry(program: Program, node_id: str, catalog: Catalog, worker_id: str) -> CatalogEntry:
    """The catalog entry that runs ``node_id`` here, or an error naming what is."""
    for name in program.op_candidates(node_id):
        if name in catalog:
            return catalog.get(name)
    wanted = program.op_candidates(node_id)[0]
    raise UnknownNodeError.for_node(wanted, worker_id, catalog.names())


def run_block(
    program: Program,
    block: Block,
    run_id: str,
    epoch: int,
    input_expr: Expr,
    *,
    store: ValueStore,
    catalog: Catalog,
    worker_id: str,
) -> LeafResult:
    """Run the block's nodes on its input; store each output; report the result."""
    started = time.time()
    value = materialize(input_expr, store.get_value)
    nodes = block.task_node_ids()
    entries = [resolve_entry(program, n, catalog, worker_id) for n in nodes]
    result = LeafResult(output={}, worker_id=worker_id, started_at=started)
    if isinstance(block.node, Stream):
        outputs = {nodes[-1]: _run_stream(program, nodes, entries, value, block.node.chunk_size)}
    else:
        outputs = _run_chain(program, nodes, entries, value)
    node = block.node
    last = nodes[-1]
    if isinstance(node, Step) and isinstance(outputs[last], Handoff):
        handoff = outputs[last]
        result.handoff = handoff_target(last, handoff, [label for label, _ in node.handoffs])
        outputs[last] = handoff.value if handoff.has_value else value
    elif isinstance(node, Branch):
        result.label = branch_label(last, outputs[last], node.labels())
    for node_id, output in outputs.items():
        if node_id in program.signal_nodes:
            result.signals[node_id] = loop_should_stop(node_id, output)
        result.node_outputs[node_id] = ref_expr(store.put_value(run_id, node_id, epoch, output))
    # A Branch passes its own input to the chosen arm; everything else passes its output.
    result.output = result.node_outputs[last]
    result.ended_at = time.time()
    return result


def _run_chain(
    program: Program, nodes: list[str], entries: list[CatalogEntry], value: Any
) -> dict[str, Any]:
    outputs: dict[str, Any] = {}
    for node_id, entry in zip(nodes, entries, strict=True):
        value = call_node(entry, value, program.params.get(node_id))
        outputs[node_id] = value
    return outputs


def _run_stream(
    program: Program, nodes: list[str], entries: list[CatalogEntry], value: Any, chunk_size: int
) -> Any:
    """Each chunk through every node in order; outputs concatenated in input order."""
    if not isinstance(value, Sequence | bytes) and not hasattr(value, "__len__"):
        raise ControlFlowError(
            f"stream '{nodes[0]}' needs a list or array to split into chunks, "
            f"got {type(value).__name__}"
        )
    pieces = []
    for start in range(0, len(value), chunk_size):
        chunk = value[start : start + chunk_size]
        for node_id, entry in zip(nodes, entries, strict=True):
            chunk = call_node(entry, chunk, program.params.get(node_id))
        pieces.append(chunk)
    return _concatenate(nodes[-1], pieces)


def _concatenate(node_id: str, pieces: list[Any]) -> Any:
    if not pieces:
        return []
    if all(isinstance(p, list | tuple) for p in pieces):
        return [item for piece in pieces for item in piece]
    if all(isinstance(p, np.ndarray) for p in pieces):
        return np.concatenate(pieces)
    raise ControlFlowError(
        f"stream node '{node_id}' must return a list or array for each chunk, "
        f"got {type(pieces[0]).__name__}"
    )
