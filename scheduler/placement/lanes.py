"""Lanes: where the nodes being placed run unless a rule says otherwise, and why.

Shared by the placement walk (:mod:`scheduler.placement.walk`) and its entry points
(:mod:`scheduler.placement.schedule`), with the small helpers both use to name a
choice.
"""

from __future__ import annotations

from scheduler.model.plan import PlanNode, Remote, RemoteTarget
from scheduler.model.workers import WorkerInfo

Ids = tuple[str, ...]


class Lane:
    """Where the nodes being placed run unless a rule says otherwise, and why.

    ``target``: the requirement of the ``Remote`` the lane is inside (None:
    any worker), which parallels nested in it must honour too.
    ``holds_slot``: the lane is a parallel branch holding one slot on its
    worker, which it lends out while a nested parallel or remote runs.
    """

    __slots__ = ("holds_slot", "reason", "target", "worker_id")

    def __init__(
        self,
        worker_id: str,
        reason: str,
        target: RemoteTarget | None = None,
        holds_slot: bool = False,
    ) -> None:
        self.worker_id = worker_id
        self.reason = reason
        self.target = target
        self.holds_slot = holds_slot

    def inner(self, reason: str) -> Lane:
        """The same worker, target and slot, for a controller's children."""
        return Lane(self.worker_id, reason, self.target, self.holds_slot)


def unique(ids: list[str]) -> Ids:
    return tuple(dict.fromkeys(ids))


def wants_gpu(target: RemoteTarget | None) -> bool:
    return target is not None and target.tag == "gpu"


def first_id(node: PlanNode) -> str:
    if isinstance(node, Remote):
        return node.node_id
    return next(node.iter_node_ids(), "(empty)")


def choice_reason(
    target: RemoteTarget | None, group: list[WorkerInfo], free: int, what: str
) -> str:
    if target is not None and target.worker_id is not None:
        return f"pinned to worker '{target.worker_id}'"
    if target is not None and len(group) == 1:
        return f"only worker with tag '{target.tag}'"
    among = "" if target is None else f" of {len(group)} workers with tag '{target.tag}'"
    if free <= 0:
        return f"{what}: every eligible worker full; queued where slots are least overcommitted"
    return f"{what}: most free slots{among} ({free} free)"
