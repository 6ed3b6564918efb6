"""Running a plan in this process: ``somatize-tasks run`` and the no-worker fallback.

The same engine and the same node-running code as a distributed run, with
the run state and the values in memory and the "queue" a local work list,
so a plan tried locally computes exactly what it computes on the workers.
"""

from __future__ import annotations

import io
import itertools
import time
from collections import deque
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from scheduler import ExecutionPlan, PlanDocument, load_plan_document, plan_warnings
from somatize_tasks.authoring.request import run_parts
from somatize_tasks.catalog.entries import Catalog, default_catalog
from somatize_tasks.runtime.compile.blocks import Block
from somatize_tasks.runtime.compile.inputs import check_run_inputs
from somatize_tasks.runtime.compile.modes import run_mode
from somatize_tasks.runtime.compile.program import compile_program
from somatize_tasks.runtime.compile.values import Expr, materialize, ref_expr, value_expr
from somatize_tasks.runtime.engine.engine import Engine
from somatize_tasks.runtime.recovery.reaper_checks import past_deadline
from somatize_tasks.runtime.state.run_state import DONE, FAILED, MemoryRunState
from somatize_tasks.runtime.worker.leaf import STATE_PREFIX, run_block
from somatize_tasks.store.codecs import codec_for, codec_named

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

    def put_value(
        self, run_id: str, node_id: str, epoch: int, value: Any, attempt: int = 0
    ) -> dict[str, Any]:
        codec = codec_for(value)
        buffer = io.BytesIO()
        codec.write(value, buffer)
        key = f"{node_id}#{epoch}#{next(self._ids)}"
        self._values[key] = (codec.name, buffer.getvalue())
        return {"run_id": run_id, "node_id": node_id, "iteration": epoch, "memory_key": key}

    def put_shared(
        self, run_id: str, node_id: str, epoch: int, value: Any, attempt: int = 0
    ) -> dict[str, Any]:
        return self.put_value(run_id, node_id, epoch, value)

    def get_value(self, ref: dict[str, Any]) -> Any:
        codec_name, raw = self._values[ref["memory_key"]]
        return codec_named(codec_name).read(io.BytesIO(raw))


class _WorkList:
    """A dispatcher that queues task blocks and runs them one by one, in order."""

    def __init__(self) -> None:
        self.pending: deque[tuple[Block, int, Expr]] = deque()

    def dispatch(self, block: Block, epoch: int, input_expr: Expr) -> None:
        self.pending.append((block, epoch, input_expr))

    def together(self) -> AbstractContextManager[None]:
        return nullcontext()

    def run_finished(self, status: str, output: Expr | None) -> None:
        self.pending.clear()


@dataclass
class LocalRunResult:
    """How a local run ended: its status, output value, per-node statuses, the
    states a fit learned (by node) and the plan's warnings."""

    status: str
    output: Any
    error: dict[str, Any] | None
    nodes: dict[str, dict[str, Any]]
    states: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def run_local(
    plan: ExecutionPlan | PlanDocument | Any,
    *,
    input: Any = None,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    ops: Mapping[str, str] | None = None,
    catalog: Catalog | None = None,
    run_id: str = "local",
    predecessors: Mapping[str, list[str]] | None = None,
    mode: str | None = None,
    y: Any = None,
    states: Mapping[str, Any] | None = None,
    deadline_s: float | None = None,
    fuse: bool = True,
    max_passes: int | None = None,
) -> LocalRunResult:
    """Run ``plan`` to the end in this process, with the same semantics as on workers.

    ``plan`` is anything ``submit_plan`` takes (JSON, a document, a plan built in Python).
    ``mode`` is ``"fit"`` (with labels ``y``) or ``"forward"`` (with ``states``,
    node id to state); by default a run with states forwards and one without fits.
    ``deadline_s`` is checked between nodes (a node running here is not interrupted);
    ``max_passes`` bounds its loops' passes, all together, as on workers.
    ``fuse``: run consecutive Executes of a Sequence as one task, as a worker does.
    """
    started = time.time()
    parts = run_parts(plan, params, ops, catalog)
    params, ops = parts.params, parts.ops
    if parts.states is not None and states is None and mode != "fit":
        states = parts.states  # a Soma bundle runs forward with its own states
    document = load_plan_document(parts.document, predecessors)
    check_run_inputs(document.plan, params, ops, default_catalog if catalog is None else catalog)
    store = MemoryValueStore()
    chosen = run_mode(document.plan, mode, states is not None, y is not None)
    program = compile_program(
        document.plan,
        params=params,
        ops=ops,
        local_worker=LOCAL_WORKER,
        predecessors=document.predecessors,
        mode=chosen,
        labels=None if y is None else _put(store, run_id, "__labels__", y),
        states={n: _put(store, run_id, STATE_PREFIX + n, v) for n, v in (states or {}).items()},
        fused=None if fuse else [],
    )
    input_expr = value_expr(input)
    state = MemoryRunState(input_expr, max_passes or 0)
    work = _WorkList()
    engine = Engine(program, state, work)
    engine.begin(input_expr)
    while work.pending and state.is_active():
        if deadline_s is not None and _past_deadline(state, run_id, document, started, deadline_s):
            break
        block, epoch, input_expr = work.pending.popleft()
        state.mark_nodes(block.task_node_ids(), "running", LOCAL_WORKER, epoch)
        try:
            result = run_block(
                program,
                block,
                run_id,
                epoch,
                input_expr,
                store=store,
                catalog=default_catalog if catalog is None else catalog,
                worker_id=LOCAL_WORKER,
            )
        except Exception as exc:
            engine.node_failed(block, epoch, exc, LOCAL_WORKER)
            break
        engine.leaf_done(block.index, epoch, result)
    output = None
    if state.status == DONE and state.output is not None:
        output = materialize(state.output, store.get_value)
    learned = {n: materialize(e, store.get_value) for n, e in state.states.items()}
    warnings = [*plan_warnings(document.plan), *(state.warnings[k] for k in sorted(state.warnings))]
    return LocalRunResult(state.status, output, state.error, state.nodes, learned, warnings)


def _past_deadline(
    state: MemoryRunState,
    run_id: str,
    document: PlanDocument,
    started: float,
    deadline_s: float,
) -> bool:
    """Fail the run if its deadline passed (the same error as on workers)."""
    failure = past_deadline(
        run_id, started + deadline_s, deadline_s, state.nodes, document.plan.node_ids(), time.time()
    )
    if failure is None:
        return False
    state.finish(FAILED, error=failure.detail())
    return True


def _put(store: MemoryValueStore, run_id: str, node_id: str, value: Any) -> Expr:
    return ref_expr(store.put_value(run_id, node_id, 0, value))
