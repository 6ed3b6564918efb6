"""Scores: ranking the feasible workers, and counting the slots handed out.

Lower keys win. Within one parallel phase a worker that holds fewer of its
branches wins (rule 2: branches spread), then the one with the most free
slots left, then, for work that does not ask for a GPU, a worker without
one (GPUs stay free for the work that needs them), then more CPU cores,
then the worker id, so the same input always gives the same output.

Slots are counted as they are handed out: a parallel branch holds one slot
on its worker until the parallel phase ends. When every feasible worker is
full, further branches go where the overflow is smallest relative to each
worker's capacity (in proportion to free slots), and the caller warns.
"""

from __future__ import annotations

import heapq

from scheduler.workers import WorkerInfo

ScoreKey = tuple[int, int, int, int, str]


class SlotLedger:
    """Free slots per worker, counted as parallel branches take and return them."""

    def __init__(self, workers: list[WorkerInfo]) -> None:
        self.capacity = {w.id: w.available_slots for w in workers}
        self.free = dict(self.capacity)

    def take(self, worker_id: str) -> None:
        self.free[worker_id] -= 1

    def give_back(self, worker_id: str) -> None:
        self.free[worker_id] += 1


def static_key(worker: WorkerInfo, free: int, wants_gpu: bool) -> ScoreKey:
    """Rank without spread: most free slots, then capability, then id."""
    gpu_kept_free = int(worker.gpu and not wants_gpu)
    return (0, -free, gpu_kept_free, -worker.cpu_cores, worker.id)


def least_loaded(workers: list[WorkerInfo], ledger: SlotLedger, wants_gpu: bool) -> WorkerInfo:
    """The best worker of a non-empty list for work that does not spread."""
    return min(workers, key=lambda w: static_key(w, ledger.free[w.id], wants_gpu))


class BranchPicker:
    """Chooses a worker per branch of one parallel phase (spread, then load).

    A heap per group of feasible workers, with lazy re-keying: an entry
    whose key no longer matches its worker's current state is pushed back
    with the fresh key instead of being used. Each pick is O(log workers),
    so a wide parallel stays linear in its number of branches.
    """

    def __init__(self, ledger: SlotLedger) -> None:
        self._ledger = ledger
        self._held: dict[str, int] = {}
        self._overflow: dict[str, int] = {}
        self._heaps: dict[tuple[int, bool], list[tuple[ScoreKey, WorkerInfo]]] = {}
        self._overflow_heaps: dict[int, list[tuple[tuple[float, str], WorkerInfo]]] = {}
        self.overflowed = 0

    def _key(self, worker: WorkerInfo, wants_gpu: bool) -> ScoreKey:
        free = self._ledger.free[worker.id]
        gpu_kept_free = int(worker.gpu and not wants_gpu)
        return (self._held.get(worker.id, 0), -free, gpu_kept_free, -worker.cpu_cores, worker.id)

    def pick(self, group: list[WorkerInfo], wants_gpu: bool) -> WorkerInfo:
        """The best worker of ``group`` (non-empty) for the next branch; takes a slot."""
        heap_id = (id(group), wants_gpu)
        heap = self._heaps.get(heap_id)
        if heap is None:
            heap = [(self._key(w, wants_gpu), w) for w in group]
            heapq.heapify(heap)
            self._heaps[heap_id] = heap
        worker = self._pop_fresh(heap, wants_gpu)
        if worker is None:
            worker = self._overflow_pick(group)
            self.overflowed += 1
        else:
            self._held[worker.id] = self._held.get(worker.id, 0) + 1
            self._ledger.take(worker.id)
            heapq.heappush(heap, (self._key(worker, wants_gpu), worker))
        return worker

    def _pop_fresh(
        self, heap: list[tuple[ScoreKey, WorkerInfo]], wants_gpu: bool
    ) -> WorkerInfo | None:
        """Pop the best worker that still has a free slot, or None when all are full."""
        while heap:
            key, worker = heap[0]
            fresh = self._key(worker, wants_gpu)
            if fresh != key:
                heapq.heapreplace(heap, (fresh, worker))
                continue
            heapq.heappop(heap)
            if self._ledger.free[worker.id] > 0:
                return worker
            # Full: it cannot get a slot back before this phase ends, so drop it.
        return None

    def hold(self, worker: WorkerInfo) -> None:
        """A branch placed by a rule stronger than load (differentiable, trial)
        still takes a slot on its worker; past capacity it counts as overflow."""
        if self._ledger.free[worker.id] > 0:
            self._held[worker.id] = self._held.get(worker.id, 0) + 1
            self._ledger.take(worker.id)
        else:
            self._overflow[worker.id] = self._overflow.get(worker.id, 0) + 1
            self.overflowed += 1

    def _overflow_pick(self, group: list[WorkerInfo]) -> WorkerInfo:
        """All full: the worker whose overflow is smallest relative to its capacity."""
        heap = self._overflow_heaps.get(id(group))
        if heap is None:
            heap = [(self._overflow_key(w), w) for w in group]
            heapq.heapify(heap)
            self._overflow_heaps[id(group)] = heap
        while True:
            key, worker = heap[0]
            fresh = self._overflow_key(worker)
            if fresh == key:
                break
            heapq.heapreplace(heap, (fresh, worker))
        self._overflow[worker.id] = self._overflow.get(worker.id, 0) + 1
        heapq.heapreplace(heap, (self._overflow_key(worker), worker))
        return worker

    def _overflow_key(self, worker: WorkerInfo) -> tuple[float, str]:
        capacity = max(self._ledger.capacity[worker.id], 1)
        return ((self._overflow.get(worker.id, 0) + 1) / capacity, worker.id)

    def release_all(self) -> None:
        """The parallel phase is over: every slot it took goes back."""
        for worker_id, count in self._held.items():
            self._ledger.free[worker_id] += count
        self._held.clear()
