"""Running one task block's nodes where it landed: the body of a node task.

Plain functions over a :class:`ValueStore` and a catalog, so the Celery
task (:mod:`somatize_tasks.runtime.worker.tasks`) and the local runner share them.
The catalog is the allowlist: a node runs only if the worker's catalog
holds an entry for it, found by :meth:`Program.op_candidates`.

What a node does follows Soma's ``run_node``: in a fit, a trainable Filter
learns its state from its input and the run's labels (``fit(x, y)``), then
forwards with it, and the state is kept; in a forward run it uses the state
the run was given and is never fitted. A node's input is the block's input
(the plan's shape) or, with a predecessors graph, resolved from its
predecessors' outputs (:func:`somatize_tasks.runtime.compile.values.node_input_expr`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from scheduler import Branch, Composite, Step, Stream
from somatize_tasks.cache.content import ContentCache, Hit
from somatize_tasks.catalog.entries import BoundNode, Catalog, CatalogEntry
from somatize_tasks.catalog.trial import NodeContext, Reporter, running
from somatize_tasks.errors import ControlFlowError, MissingStateError, UnknownNodeError
from somatize_tasks.runtime.compile.blocks import Block
from somatize_tasks.runtime.compile.control import (
    Handoff,
    branch_selector,
    choose_arm,
    handoff_target,
    no_signal_message,
    read_loop_signal,
)
from somatize_tasks.runtime.compile.program import FIT, Program
from somatize_tasks.runtime.compile.values import Expr, materialize, node_input_expr, ref_expr
from somatize_tasks.runtime.state.failures import tag_failure
from somatize_tasks.runtime.state.run_state import LeafResult
from somatize_tasks.runtime.worker.memo import BlockMemo, NodeKeys
from somatize_tasks.runtime.worker.stream import run_stream

STATE_PREFIX = "__state_"


class ValueStore(Protocol):
    """Where node outputs go: the artifact store, or memory for local runs."""

    def put_value(
        self, run_id: str, node_id: str, epoch: int, value: Any, attempt: int = 0
    ) -> dict[str, Any]:
        """Store an output under its own key for ``attempt`` (fencing)."""
        ...

    def put_shared(
        self, run_id: str, node_id: str, epoch: int, value: Any, attempt: int = 0
    ) -> dict[str, Any]:
        """Like ``put_value``, but readable by every worker (a fitted state)."""
        ...

    def get_value(self, ref: dict[str, Any]) -> Any: ...


def resolve_entry(program: Program, node_id: str, catalog: Catalog, worker_id: str) -> CatalogEntry:
    """The catalog entry that runs ``node_id`` here, or an error naming what is."""
    for name in program.op_candidates(node_id):
        entry = catalog.resolve(name)
        if entry is not None:
            return entry
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
    attempt: int = 0,
    cache: ContentCache | None = None,
    reporter: Reporter | None = None,
    clock: Callable[[], float] = time.time,
) -> LeafResult:
    """Run the block's nodes on its input; store each output; report the result.

    ``attempt`` is this execution's fencing token (from ``mark_running``): every
    value it writes goes under a key of its own, and its record holds only if it
    is still the block's current attempt. With a ``cache`` and a run whose cache
    is on, each node is looked up first (:mod:`somatize_tasks.runtime.worker.memo`);
    a hit runs none of its code. While a node's code runs,
    :mod:`somatize_tasks.catalog.trial` tells it its run, seed and study trial, and
    ``reporter`` takes its ``report(...)`` calls. ``clock`` stamps when nodes start and
    end: on a worker, Redis' (:mod:`somatize_tasks.config.clock`), which the reaper
    judges time limits with."""
    started = clock()
    run = _BlockRun(program, block, run_id, epoch, input_expr, store, attempt, clock)
    if cache is not None and program.cache and not isinstance(block.node, Step):
        run.memo = BlockMemo(cache, program, run_id, run.fetch)
    nodes = block.task_node_ids()

    def bind(node_id: str) -> BoundNode:
        entry = resolve_entry(program, node_id, catalog, worker_id)
        return BoundNode(entry, program.params.get(node_id))

    result = LeafResult(output={}, worker_id=worker_id, started_at=started, attempt=attempt)
    node = block.node
    # A Stream or Composite needs all its nodes at once; a chain binds each node when
    # its turn comes, so an unknown node fails as itself, after the nodes before it ran.
    together = isinstance(node, Stream) or type(node) is Composite
    bound = {n: _bound_or_tagged(bind, n, clock) for n in nodes} if together else {}

    def context(node_id: str) -> NodeContext:
        return NodeContext(run_id, node_id, program.seed, program.trial, reporter)

    if isinstance(node, Stream):
        with running(context(nodes[0])):
            run.stream(nodes, bound, node.chunk_size)
    else:
        with running(context(nodes[0])):
            fitted = type(node) is Composite and run.fit_composite(nodes, bound)
        for node_id in [] if fitted else nodes:
            began = clock()
            try:
                with running(context(node_id)):
                    run.node(node_id, bound.get(node_id) or bind(node_id))
            except Exception as exc:
                tag_failure(exc, node_id, began, run.times, run.outputs, clock())
                raise
    last = nodes[-1]
    if isinstance(node, Branch):
        labels = node.labels()
        result.label = labels[choose_arm(last, branch_selector(last, run.raw[last]), labels)]
        run.keep(last, run.input_of(last))  # the selector is control: the arm reads the input
    elif isinstance(run.raw[last], Handoff):
        handoff = run.raw[last]
        if not isinstance(node, Step):
            raise ControlFlowError(f"node '{last}' returned a Handoff but is not a Step")
        result.handoff = handoff_target(last, handoff, [label for label, _ in node.handoffs])
        run.keep(
            last, run.store_value(last, handoff.value) if handoff.has_value else run.input_of(last)
        )
    result.node_outputs = run.outputs
    result.cached = run.cached
    result.cache_keys = run.cache_keys
    result.node_times = run.times
    result.states = run.states
    result.signals = _signals(program, run)
    result.output = run.outputs[last]
    result.ended_at = clock()
    return result


def _bound_or_tagged(
    bind: Callable[[str], BoundNode], node_id: str, clock: Callable[[], float] = time.time
) -> BoundNode:
    """``bind(node_id)``; a failure is tagged as the node's own (nothing else ran)."""
    began = clock()
    try:
        return bind(node_id)
    except Exception as exc:
        tag_failure(exc, node_id, began, {}, {}, clock())
        raise


def _signals(program: Program, run: _BlockRun) -> dict[str, str]:
    """The loop verdict of each condition node's output: stop, continue, or why neither."""
    found = {}
    for node_id, expr in run.outputs.items():
        loop_id = program.signal_nodes.get(node_id)
        if loop_id is None:
            continue
        value = run.value_of(node_id, expr)
        found[node_id] = read_loop_signal(value) or no_signal_message(loop_id, node_id, value)
    return found


class _BlockRun:
    """One task's nodes: their inputs, outputs (stored once each) and fitted states."""

    def __init__(
        self,
        program: Program,
        block: Block,
        run_id: str,
        epoch: int,
        input_expr: Expr,
        store: ValueStore,
        attempt: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.program = program
        self.clock = clock
        self.run_id, self.epoch, self.attempt = run_id, epoch, attempt
        self.store = store
        self.input_expr = input_expr
        self.first = block.task_node_ids()[0]
        self.raw: dict[str, Any] = {}  # what each node returned, in memory
        self.outputs: dict[str, Expr] = {}  # each node's output as stored
        self.states: dict[str, Expr] = {}
        self.times: dict[str, list[float]] = {}  # each node's [started, ended]
        self._memo: dict[str, Any] = {}
        self._labels: Any = None
        self._labels_read = False
        self.memo: BlockMemo | None = None  # the content cache, when the run uses it
        self.cached: list[str] = []  # nodes served from the cache, none of their code run
        self.cache_keys: dict[str, str] = {}  # each cached or stored node's output key

    # --- inputs ------------------------------------------------------------------------

    def input_of(self, node_id: str) -> Expr:
        """The node's input as an expression (Soma's ``resolve_input`` with a graph)."""
        if not self.program.follows_graph:
            return self.input_expr if node_id == self.first else self.outputs[self._previous]
        available = dict(self.input_expr.get("graph", {}))
        available.update(self.outputs)  # what this block produced first wins
        return node_input_expr(self.program.preds_of(node_id), available)

    def value_of(self, node_id: str, expr: Expr) -> Any:
        """A stored output's value, from memory when this block produced it."""
        if node_id in self.raw and self.outputs.get(node_id) is expr:
            return self.raw[node_id]
        return materialize(expr, self.fetch)

    def fetch(self, ref: dict[str, Any]) -> Any:
        key = (
            f"{ref.get('run_id')}/{ref.get('node_id')}#{ref.get('iteration', 0)}"
            f"#{ref.get('attempt', 0)}"
        )
        if key not in self._memo:
            self._memo[key] = self.store.get_value(ref)
        return self._memo[key]

    def _input_value(self, node_id: str) -> Any:
        if not self.program.follows_graph and node_id != self.first:
            return self.raw[self._previous]
        return materialize(self.input_of(node_id), self.fetch)

    @property
    def _previous(self) -> str:
        return next(reversed(self.raw))

    # --- running -----------------------------------------------------------------------

    def node(self, node_id: str, bound: BoundNode) -> None:
        """Soma's ``run_node``: fit if a fit asks it (its state looked up first), then the
        output looked up, else computed; each kept in the cache when it is on."""
        started = self.clock()
        keys = None if self.memo is None else self.memo.keys(node_id, bound, self.input_of(node_id))
        ran = False
        if self.program.mode == FIT and bound.trainable:
            state, state_hash, ran = self._fit(node_id, bound, keys)
        else:
            state = self.state_for(node_id, bound)
            state_hash = None if keys is None else keys.memo.state_hash(node_id, state)
        out_key = None
        if keys is not None and state_hash is not None and bound.entry.deterministic:
            out_key = keys.memo.output_key(keys.config, state_hash, keys.input)
            if self._take_hit(node_id, out_key, served=not ran):
                self.times[node_id] = [started, self.clock()]
                return
        computing = time.time()
        output = bound.forward(self._input_value(node_id), state)
        self.raw[node_id] = output
        if not isinstance(output, Handoff):
            self.keep(node_id, self.store_output(node_id, output, out_key, time.time() - computing))
        self.times[node_id] = [started, self.clock()]

    def _fit(
        self, node_id: str, bound: BoundNode, keys: NodeKeys | None
    ) -> tuple[Any, str | None, bool]:
        """The node's state, its content hash, and whether ``fit`` ran (not a hit)."""
        key = None if keys is None else keys.memo.state_key(keys.config, keys.input)
        hit = None if key is None else self.memo_lookup(key)
        if hit is not None and keys is not None:
            name = STATE_PREFIX + node_id
            self.states[node_id] = keys.memo.adopt(
                hit, name, self.epoch, shared=True, attempt=self.attempt
            )
            return hit.value, hit.record.hash, False
        computing = time.time()
        state = bound.fit(self._input_value(node_id), self.labels())
        self.keep_state(node_id, state)
        if keys is None:
            return state, None, True
        expr = keys.memo.store(key, "state", self.states[node_id], state, time.time() - computing)
        self.states[node_id] = expr
        return state, str(expr["hash"]), True

    def memo_lookup(self, key: str) -> Hit | None:
        return None if self.memo is None else self.memo.lookup(key)

    def _take_hit(self, node_id: str, key: str, *, served: bool) -> bool:
        """Use the entry under ``key`` as the node's output, if there is one."""
        hit = self.memo_lookup(key)
        if hit is None or self.memo is None:
            return False
        self.raw[node_id] = hit.value
        shared = node_id in self.program.final_nodes
        adopted = self.memo.adopt(hit, node_id, self.epoch, shared=shared, attempt=self.attempt)
        self.keep(node_id, adopted)
        self.cache_keys[node_id] = key
        if served:
            self.cached.append(node_id)
        return True

    def stream(self, nodes: list[str], bound: dict[str, BoundNode], chunk_size: int) -> None:
        if self.program.mode == FIT:
            raise ControlFlowError(
                f"stream '{nodes[0]}' cannot run in a fit (as in Soma): fit the plan "
                "without the stream first, then run it forward with those states"
            )
        last, started = nodes[-1], self.clock()
        key = None
        if self.memo is not None:
            key = self.memo.stream_key(nodes, bound, self.input_of(nodes[0]), chunk_size)
        if key is not None and self._take_hit(last, key, served=True):
            self.cached += nodes[:-1]  # the whole stream was served
            self.times[last] = [started, self.clock()]
            return
        chain = [(n, bound[n]) for n in nodes]
        output = run_stream(chain, self._input_value(nodes[0]), chunk_size, self.stream_state)
        self.raw[last] = output
        self.keep(last, self.store_output(last, output, key, self.clock() - started))

    def fit_composite(self, nodes: list[str], bound: dict[str, BoundNode]) -> bool:
        """Fit the block at once through its first filter's ``composite_fit``, as Soma
        does in a fit; False when it does not offer to (the nodes then run one by one)."""
        first = bound[nodes[0]]
        if self.program.mode != FIT or not first.entry.can_fit_composite:
            return False
        peers = [(n, bound[n].instance) for n in nodes]
        fitted = first.instance.composite_fit(peers, self._input_value(nodes[0]), self.labels())
        if fitted is None:
            return False
        output, states = fitted
        for node_id, state in dict(states).items():
            self.keep_state(node_id, state)
        self.raw[nodes[-1]] = output
        self.keep(nodes[-1], self.store_value(nodes[-1], output))
        return True

    # --- values and states -------------------------------------------------------------

    def store_value(self, node_id: str, value: Any) -> Expr:
        """Store an output; one that can be the run's output goes to the shared store
        at once, so it outlives this worker (``Program.final_nodes``)."""
        put = self.store.put_shared if node_id in self.program.final_nodes else self.store.put_value
        return ref_expr(put(self.run_id, node_id, self.epoch, value, self.attempt))

    def store_output(self, node_id: str, value: Any, key: str | None, compute_s: float) -> Expr:
        """Store a computed output for the run, and in the cache under ``key`` when there
        is one; with its content hash when the run uses the cache."""
        stored = self.store_value(node_id, value)
        if self.memo is None:
            return stored
        if key is not None:
            self.cache_keys[node_id] = key
        return self.memo.store(key, "output", stored, value, compute_s)

    def keep(self, node_id: str, expr: Expr) -> None:
        self.outputs[node_id] = expr

    def keep_state(self, node_id: str, state: Any) -> None:
        ref = self.store.put_shared(
            self.run_id, STATE_PREFIX + node_id, self.epoch, state, self.attempt
        )
        self.states[node_id] = ref_expr(ref)

    def labels(self) -> Any:
        if not self._labels_read:
            labels = self.program.labels
            self._labels = None if labels is None else materialize(labels, self.fetch)
            self._labels_read = True
        return self._labels

    def stream_state(self, node_id: str, bound: BoundNode) -> Any:
        """A stream node's starting state: the run's, or None (Soma's ``Value::Empty``)
        when it was never fitted, in every stream mode, where a plain forward fails."""
        expr = self.program.states.get(node_id)
        return None if expr is None else materialize(expr, self.fetch)

    def state_for(self, node_id: str, bound: BoundNode) -> Any:
        """The state a forward uses: the run's, or None for what learns nothing."""
        expr = self.program.states.get(node_id)
        if expr is not None:
            return materialize(expr, self.fetch)
        if bound.trainable and self.program.mode != FIT:
            raise MissingStateError(
                f"node '{node_id}' is a trainable filter ({bound.entry.qualname}) and this "
                "forward run has no state for it: fit the plan first (mode='fit', CLI "
                "--mode fit) and run forward with its states (states_from=RUN_ID or a "
                "states file; CLI --states-from)"
            )
        return None
