"""A block: one plan variant in a compiled program's flat table (:mod:`.program`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler import Branch, Composite, Execute, PlanNode, Step, Stream

TASK_KINDS = frozenset({"Execute", "Composite", "Stream", "Branch", "Step", "Chain"})


@dataclass(slots=True)
class Block:
    """One plan variant in the compiled table."""

    index: int
    kind: str
    node: PlanNode
    parent: int | None
    position: int
    children: list[int] = field(default_factory=list)
    worker_id: str | None = None

    @property
    def runs_task(self) -> bool:
        return self.kind in TASK_KINDS

    def task_node_ids(self) -> list[str]:
        """The nodes this block's task runs, in order."""
        node = self.node
        if isinstance(node, Composite | Stream):
            return list(node.node_ids_)
        if isinstance(node, Execute | Branch | Step):
            return [node.node_id]
        return []
