"""Fused chains: consecutive Executes of a Sequence placed on one worker run as one task.

No data moves inside a sequential phase (placement rule 1), so publishing
every step as its own message only adds a broker round trip and a Redis
write per node. A run of two or more ``Execute`` steps of one Sequence on
the same worker becomes one :class:`Chain` block: one task that runs the
nodes in order, passing values in memory, exactly as a Composite does
outside a fit. Each node still gets its own output, status and times.

Which nodes fuse is decided once, when the run is submitted, and kept with
the run (``fused`` in its meta): a re-placement after a worker dies moves a
chain as a whole and must never renumber the blocks the reaper is repairing.
"""

from __future__ import annotations

from typing import ClassVar

from scheduler import Composite, Execute
from somatize_tasks.runtime.compile.blocks import Block


class Chain(Composite):
    """A run of a Sequence's Executes fused into one task by placement, not by the plan."""

    tag: ClassVar[str] = "Chain"


def fusion_groups(blocks: list[Block]) -> list[list[str]]:
    """The node ids of every run of 2+ consecutive same-worker Executes of a Sequence."""
    groups: list[list[str]] = []
    for block in blocks:
        if block.kind != "Sequence":
            continue
        run: list[Block] = []
        for child in [blocks[i] for i in block.children] + [None]:
            if child is not None and _joins(run, child):
                run.append(child)
                continue
            if len(run) >= 2:
                groups.append([b.task_node_ids()[0] for b in run])
            run = [child] if child is not None and isinstance(child.node, Execute) else []
    return groups


def _joins(run: list[Block], child: Block) -> bool:
    return (
        isinstance(child.node, Execute)
        and bool(run)
        and child.worker_id is not None
        and child.worker_id == run[0].worker_id
    )


def apply_fusion(blocks: list[Block], groups: list[list[str]]) -> None:
    """Replace each group's Execute blocks by one Chain block in their Sequence.

    The fused Executes stay in the table (their indices never change) but no
    longer belong to their Sequence; the Chain blocks are appended.
    """

    index_of = {b.task_node_ids()[0]: b for b in blocks if isinstance(b.node, Execute)}
    for group in groups:
        members = [index_of[node_id] for node_id in group]
        parent = blocks[members[0].parent or 0]
        node = Chain.model_construct(node_ids_=list(group))
        chain = Block(
            len(blocks),
            Chain.tag,
            node,
            parent.index,
            members[0].position,
            worker_id=members[0].worker_id,
        )
        blocks.append(chain)
        fused = {m.index for m in members}
        children = [i for i in parent.children if i not in fused or i == members[0].index]
        parent.children = [chain.index if i == members[0].index else i for i in children]
        for position, child in enumerate(parent.children):
            blocks[child].position = position
