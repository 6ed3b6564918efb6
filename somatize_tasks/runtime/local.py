"""Running a plan in this process: ``somatize-tasks run`` and the no-worker fallback.

The same engine and the same node-running code as a distributed run, with
the run state and the values in memory and the "queue" a local work list,
so a plan tried locally computes exactly what it computes on the workers.
"""

from __future__ import annotations

import io
import itertools
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler import ExecutionPlan, load_plan
from somatize_tasks.catalog import Catalog, default_catalog
from somatize_tasks.codecs import codec_for, codec_named
from somatize_tasks.runtime.engine import Engine
from somatize_tasks.runtime.leaf import run_block
from somatize_tasks.runtime.program import Block, compile_program
from somatize_tasks.runtime.state import DONE, MemoryRunState
from somatize_tasks.runtime.values import Expr, materialize, value_expr

LOCAL_WORKER = "local"


class MemoryValueStore:
    """Node outputs kept in memory, encoded by the same codecs as on workers.

    Encoding here too means a plan tried locally fails the same way a
    distributed run would on an output no codec can carry, and no node can
    change a value another node already received.
    """

    def __init__(self) -> None:
        self._values: dict[str, tuple[str, bytes]] = {}
        self._ids = itertools.count()

    def put_value(self, run_id: str, node_id: str, epoch: int, value: Any) -> dict[str, Any]:
        codec = codec_for(value)
        buffer = io.BytesIO()
        codec.write(value, buffer)
        key = f"{node_id}#{epoch}#{next(self._ids)}"
        self._values[key] = (codec.name, buffer.getvalue())
        return {"run_id": run_id, "node_id": node_id, "iteration": epoch, "memory_key": key}

    def get_value(self, ref: dict[str, Any]) -> Any:
        codec_name, raw = self._values[ref["memory_key"]]
        return codec_named(codec_name).read(io.BytesIO(raw))


class _WorkList:
    """A dispatcher that queues task blocks and runs them one by one, in order."""

    def __init__(self) -> None:
        self.pending: deque[tuple[Block, int, Expr]] = deque()

    def dispatch(self, block: Block, epoch: int, input_expr: Expr) -> None:
        self.pending.append((block, epoch, input_expr))

    def run_finished(self, status: str, output: Expr | None) -> None:
        self.pending.clear()


@dataclass
class LocalRunResult:
    """How a local run ended: its status, output value and per-node states."""

    status: str
    output: Any
    error: dict[str, Any] | None
    nodes: dict[str, dict[str, Any]]


def run_local(
    plan: ExecutionPlan | Any,
    *,
    input: Any = None,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    ops: Mapping[str, str] | None = None,
    catalog: Catalog | None = None,
    run_id: str = "local",
) -> LocalRunResult:
    """Run ``plan`` to the end in this process, with the same semantics as on workers."""
    program = compile_program(load_plan(plan), params=params, ops=ops, local_worker=LOCAL_WORKER)
    state = MemoryRunState()
    store = MemoryValueStore()
    work = _WorkList()
    engine = Engine(program, state, work)
    engine.start(0, 0, value_expr(input))
    while work.pending and state.is_active():
        block, epoch, input_expr = work.pending.popleft()
        state.mark_nodes(block.task_node_ids(), "running", LOCAL_WORKER, epoch)
        try:
            result = run_block(
                program, block, run_id, epoch, input_expr,
                store=store, catalog=default_catalog if catalog is None else catalog,
                worker_id=LOCAL_WORKER,
            )  # fmt: skip
        except Exception as exc:
            state.mark_nodes(block.task_node_ids(), "failed", LOCAL_WORKER, epoch)
            engine.fail(block, exc, LOCAL_WORKER)
            break
        engine.leaf_done(block.index, epoch, result)
    output = None
    if state.status == DONE and state.output is not None:
        output = materialize(state.output, store.get_value)
    return LocalRunResult(state.status, output, state.error, state.nodes)
