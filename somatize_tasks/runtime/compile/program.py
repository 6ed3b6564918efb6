"""A plan compiled for running: a flat table of blocks, one per plan variant.

The dispatcher never walks the plan tree from the root again: every block
knows its parent, its position there and its children, so a completion
event is handled by looking at one block and its parent. Leaves are the
blocks that become a Celery task (``Execute``, ``Composite``, ``Stream``)
and the controllers that run a node of their own before deciding where to
go (``Branch``'s condition, ``Step``). ``Loop``, ``Sequence``,
``Parallel``, ``Remote`` and ``Empty`` run no task; they only route.

Compiling is linear in the plan's size and pure (no I/O), so every worker
process compiles a run's plan once and caches it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler import (
    DistributionPlan,
    ExecutionPlan,
    Loop,
    PlanNode,
    Remote,
    RemoteTarget,
    Stream,
    exit_nodes,
)
from somatize_tasks.catalog.entries import catalog_names
from somatize_tasks.runtime.compile.blocks import Block
from somatize_tasks.runtime.compile.fusion import apply_fusion, fusion_groups
from somatize_tasks.runtime.compile.values import Expr

FIT, FORWARD = "fit", "forward"


@dataclass
class Program:
    """A run's compiled plan: blocks, where each node runs and what it calls.

    ``predecessors`` is the run's data graph (None: data follows the plan's
    shape); ``mode`` is ``"fit"`` or ``"forward"``; ``labels`` the fit's
    ``y`` and ``states`` the states a forward run uses, both as value
    expressions.
    """

    plan: ExecutionPlan
    blocks: list[Block]
    worker_of: dict[str, str]
    params: dict[str, dict[str, Any]]
    ops: dict[str, str]
    #: Loop condition nodes (``WhenSignaled``), each with the loop that reads it.
    signal_nodes: dict[str, str]
    node_count: int
    version: int = 0
    block_by_node: dict[str, Block] = field(default_factory=dict)
    #: Per-node ``(soft, hard)`` time limits in seconds, fixed by the submitter.
    time_limits_s: tuple[float | None, float | None] = (None, None)
    predecessors: dict[str, list[str]] | None = None
    mode: str = FIT
    labels: Expr | None = None
    states: dict[str, Expr] = field(default_factory=dict)
    #: The fused chains (runtime.fusion), as node id lists: kept with the run.
    fused: list[list[str]] = field(default_factory=list)
    #: Nodes whose output can be (part of) the run's output: stored in the shared
    #: store when written, so the run's output outlives the worker that made it.
    final_nodes: frozenset[str] = frozenset()
    #: Whether nodes use the content cache (somatize_tasks.cache): the run's ``cache``.
    cache: bool = False
    #: The run's experiment seed: in every cache key, and readable by node code.
    seed: int | None = None
    #: The study trial this run is (``{"study": id, "number": n}``), or None.
    trial: dict[str, Any] | None = None
    _reads: dict[int, tuple[list[str], bool]] = field(default_factory=dict, repr=False)
    _passes: dict[int, list[tuple[int, int, bool]]] = field(default_factory=dict, repr=False)

    @property
    def root(self) -> Block:
        return self.blocks[0]

    @property
    def follows_graph(self) -> bool:
        return self.predecessors is not None

    def block_of(self, node_id: str) -> Block | None:
        """The task block that runs ``node_id`` (None for a Loop controller)."""
        return self.block_by_node.get(node_id)

    def branch_names(self, parallel: Block) -> list[str | None]:
        """Keys of a Parallel's branches in its output: None (keyed by the node
        the output came from) for branches with nodes, ``branch_<i>`` for empty ones."""
        return [
            None if next(self.blocks[child].node.iter_node_ids(), None) else f"branch_{i}"
            for i, child in enumerate(parallel.children)
        ]

    def preds_of(self, node_id: str) -> list[str]:
        return (self.predecessors or {}).get(node_id, [])

    def reads_of(self, block: Block) -> tuple[list[str], bool]:
        """What a task block reads from outside itself, by the graph: the
        predecessors its nodes read that it has not produced by then, and
        whether one of its nodes reads the run's input (it has none).

        A Stream reads only through its first node: the rest is a chain.
        """
        found = self._reads.get(block.index)
        if found is not None:
            return found
        nodes = block.task_node_ids()
        readers = nodes[:1] if isinstance(block.node, Stream) else nodes
        outside: dict[str, None] = {}
        produced: set[str] = set()
        wants_input = False
        for node_id in readers:
            preds = self.preds_of(node_id)
            wants_input = wants_input or not preds
            outside.update((p, None) for p in preds if p not in produced)
            produced.add(node_id)
        found = self._reads[block.index] = (list(outside), wants_input)
        return found

    def target_of(self, block: Block) -> RemoteTarget | None:
        """The nearest enclosing ``Remote`` target: what a re-placement must honour."""
        current: Block | None = block
        while current is not None:
            if isinstance(current.node, Remote):
                return current.node.target
            current = None if current.parent is None else self.blocks[current.parent]
        return None

    def pass_blocks(self, loop_bid: int) -> list[tuple[int, int, bool]]:
        """The blocks that run in one pass of loop ``loop_bid``, as (block, branches,
        is a loop): every block of its body, down to loops nested in it (whose own
        bodies run in passes of their own). A Parallel's branch count names its join
        slots. What a forgotten pass's fields are (``runtime.state.start_state``)."""
        found = self._passes.get(loop_bid)
        if found is not None:
            return found
        found, stack = [], list(self.blocks[loop_bid].children)
        while stack:
            block = self.blocks[stack.pop()]
            nested = block.kind == "Loop"
            found.append((block.index, len(block.children) * (block.kind == "Parallel"), nested))
            if not nested:
                stack.extend(block.children)
        self._passes[loop_bid] = found
        return found

    def op_candidates(self, node_id: str) -> list[str]:
        """Catalog names to try for ``node_id``, best first.

        An explicit ``ops`` entry wins. Otherwise the node id itself, then
        Soma's numbering of repeated filters: ``double_2`` is the second
        ``double``, so it runs ``double`` unless the catalog has ``double_2``.
        """
        return catalog_names(node_id, self.ops)


def compile_program(
    plan: ExecutionPlan,
    distribution: DistributionPlan | None = None,
    *,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    ops: Mapping[str, str] | None = None,
    local_worker: str = "local",
    version: int = 0,
    time_limits_s: tuple[float | None, float | None] = (None, None),
    predecessors: Mapping[str, list[str]] | None = None,
    mode: str = FIT,
    labels: Expr | None = None,
    states: Mapping[str, Expr] | None = None,
    fused: list[list[str]] | None = None,
    placed: Mapping[str, str] | None = None,
    cache: bool = False,
    seed: int | None = None,
    trial: Mapping[str, Any] | None = None,
) -> Program:
    """Flatten ``plan`` into blocks; without a distribution, every node is local.

    ``fused`` names the chains to run as one task each; None works them out
    from the placement (:mod:`somatize_tasks.runtime.compile.fusion`), ``[]`` fuses none.
    ``placed`` (node id -> worker id) stands for the distribution where only
    that is known (a worker reading a run's record).
    """
    if placed is not None:
        worker_of = dict(placed)
    else:
        worker_of = distribution.worker_of() if distribution is not None else {}
    blocks: list[Block] = []
    stack: list[tuple[PlanNode, int | None, int]] = [(plan.root, None, 0)]
    while stack:
        node, parent, position = stack.pop()
        block = Block(len(blocks), node.tag, node, parent, position)
        blocks.append(block)
        if parent is not None:
            blocks[parent].children.append(block.index)
        task_nodes = block.task_node_ids()
        if task_nodes:
            block.worker_id = worker_of.get(task_nodes[0], local_worker)
        children = node.children()
        stack.extend((child, block.index, i) for i, child in reversed(list(enumerate(children))))
    _order_children(blocks)
    if fused is None:
        fused = fusion_groups(blocks)
    apply_fusion(blocks, fused)
    return Program(
        plan=plan,
        blocks=blocks,
        worker_of=worker_of,
        params={k: dict(v) for k, v in (params or {}).items()},
        ops=dict(ops or {}),
        signal_nodes=_signal_nodes(blocks),
        node_count=len(plan.node_ids()),
        version=version,
        # A fused Execute's chain comes later in the table, so it wins here.
        block_by_node={n: b for b in blocks for n in b.task_node_ids()},
        time_limits_s=time_limits_s,
        predecessors=None if predecessors is None else dict(predecessors),
        mode=mode,
        labels=labels,
        states=dict(states or {}),
        fused=fused,
        final_nodes=final_nodes(plan, blocks),
        cache=cache,
        seed=seed,
        trial=None if trial is None else dict(trial),
    )


def final_nodes(plan: ExecutionPlan, blocks: list[Block]) -> frozenset[str]:
    """The plan's exit nodes (what its output is made of, by the data-flow rules), and
    every Loop's ``carry_from``, whose value a loop at the end passes on."""
    carried = {b.node.carry_from for b in blocks if isinstance(b.node, Loop) and b.node.carry_from}
    return frozenset(exit_nodes(plan)) | carried


def _order_children(blocks: list[Block]) -> None:
    """Children were appended in visit order; sort each list by position."""
    for block in blocks:
        if len(block.children) > 1:
            block.children.sort(key=lambda i: blocks[i].position)


def _signal_nodes(blocks: list[Block]) -> dict[str, str]:
    """Nodes whose output a Loop reads as its stop signal, with that loop's id."""
    found: dict[str, str] = {}
    for block in blocks:
        node = block.node
        if isinstance(node, Loop) and node.until.type == "WhenSignaled" and node.until.node:
            found.setdefault(node.until.node, node.node_id)
    return found
