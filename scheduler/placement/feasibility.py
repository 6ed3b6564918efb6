"""Filters: which workers can take a node at all, and why the others cannot.

The first stage of every placement decision (the second, ranking the
feasible workers, lives in :mod:`scheduler.placement.scoring`). A rejection carries a
reason so that the final error can count them — "0/3 workers can take
'train': 2 lack tag 'gpu', 1 at capacity" — and a caller can tell "never
fits" (no such tag) from "not now" (full).
"""

from __future__ import annotations

from collections import Counter
from operator import attrgetter

from scheduler.errors import AT_CAPACITY, PlacementError
from scheduler.model.plan import RemoteTarget
from scheduler.model.workers import WorkerInfo, check_unique_ids


class Feasibility:
    """Indexes the workers once so each filter is a dictionary lookup.

    ``all_workers`` is every worker the caller knows about (for counting
    rejections); only workers with free capacity are ever chosen.
    """

    def __init__(self, all_workers: list[WorkerInfo]) -> None:
        check_unique_ids(all_workers)
        self.all_workers = all_workers
        slots = [(w, w.available_slots) for w in all_workers]
        self.usable = sorted((w for w, free in slots if free > 0), key=attrgetter("id"))
        #: Free slots of each usable worker, by id.
        self.free_slots = {w.id: free for w, free in slots if free > 0}
        self._by_tag: dict[str, list[WorkerInfo]] = {}
        self._by_id: dict[str, WorkerInfo] = {w.id: w for w in self.usable}
        self._pinned: dict[str, list[WorkerInfo]] = {w.id: [w] for w in self.usable}
        for worker in self.usable:
            for tag in dict.fromkeys(worker.tags):
                self._by_tag.setdefault(tag, []).append(worker)

    def eligible(self, target: RemoteTarget | None) -> list[WorkerInfo]:
        """Usable workers that satisfy ``target`` (all usable ones for None), by id.

        The same list object is returned for the same target, so callers may
        key caches on it.
        """
        if target is None:
            return self.usable
        if target.tag is not None:
            return self._by_tag.get(target.tag, [])
        return self._pinned.get(target.worker_id or "", [])

    def worker(self, worker_id: str) -> WorkerInfo:
        """The usable worker with this id."""
        return self._by_id[worker_id]

    def satisfies(self, worker_id: str, target: RemoteTarget | None) -> bool:
        if target is None:
            return worker_id in self._by_id
        if target.tag is not None:
            worker = self._by_id.get(worker_id)
            return worker is not None and worker.matches_tag(target.tag)
        return worker_id == target.worker_id

    def rejection(self, node_id: str, target: RemoteTarget) -> PlacementError:
        """The error for a target no usable worker satisfies, counting reasons
        (most common first, then by reason, whatever order the workers came in)."""
        reasons = Counter(_why_rejected(worker, target) for worker in self.all_workers)
        ordered = dict(sorted(reasons.items(), key=lambda item: (-item[1], item[0])))
        return PlacementError(node_id, target.describe(), ordered, len(self.all_workers))


def _why_rejected(worker: WorkerInfo, target: RemoteTarget) -> str:
    if target.tag is not None and not worker.matches_tag(target.tag):
        return f"lack tag '{target.tag}'"
    if target.worker_id is not None and worker.id != target.worker_id:
        return "have another id"
    return AT_CAPACITY
