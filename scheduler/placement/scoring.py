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

from collections.abc import Iterator
from heapq import heapify, heappop, heapreplace

from scheduler.model.workers import WorkerInfo

ScoreKey = tuple[int, int, int, int, str]
OverflowKey = tuple[float, str]


class SlotLedger:
    """Free slots per worker, counted as parallel branches take and return them.

    ``outstanding`` counts slots taken and not yet given back: at zero every
    worker has its full capacity free, and a ranking computed from capacity
    alone (:meth:`ranked`) is still right. Parallels that follow one another
    reuse it instead of sorting the workers again.
    """

    def __init__(self, free_slots: dict[str, int]) -> None:
        self.capacity = dict(free_slots)
        self.free = dict(free_slots)
        self.outstanding = 0
        self._ranked: dict[tuple[int, bool], list[WorkerInfo]] = {}

    def take(self, worker_id: str) -> None:
        self.free[worker_id] -= 1
        self.outstanding += 1

    def give_back(self, worker_id: str) -> None:
        self.free[worker_id] += 1
        self.outstanding -= 1

    def ranked(self, group: list[WorkerInfo], wants_gpu: bool) -> list[WorkerInfo]:
        """``group`` best first by free slots now, then capability, then id."""
        if self.outstanding:
            return self._rank(group, wants_gpu)
        key = (id(group), wants_gpu)
        found = self._ranked.get(key)
        if found is None:
            found = self._ranked[key] = self._rank(group, wants_gpu)
        return found

    def _rank(self, group: list[WorkerInfo], wants_gpu: bool) -> list[WorkerInfo]:
        free = self.free
        return sorted(
            group, key=lambda w: (-free[w.id], w.gpu and not wants_gpu, -w.cpu_cores, w.id)
        )


def _tiebreak(worker: WorkerInfo, wants_gpu: bool) -> tuple[int, int, str]:
    """Capability, then id: GPUs kept for GPU work, more cores first, then by id."""
    return (int(worker.gpu and not wants_gpu), -worker.cpu_cores, worker.id)


def static_key(worker: WorkerInfo, free: int, wants_gpu: bool) -> ScoreKey:
    """Rank without spread: most free slots, then capability, then id."""
    return (0, -free, *_tiebreak(worker, wants_gpu))


def least_loaded(workers: list[WorkerInfo], ledger: SlotLedger, wants_gpu: bool) -> WorkerInfo:
    """The best worker of a non-empty list for work that does not spread."""
    return min(workers, key=lambda w: static_key(w, ledger.free[w.id], wants_gpu))


class BranchPicker:
    """Chooses a worker per branch of one parallel phase (spread, then load).

    The general path keeps a heap per group of feasible workers, with lazy
    re-keying: an entry whose key no longer matches its worker's current
    state (another group took a slot on it) is put back with the fresh key
    instead of being used. Each pick is O(log workers), so a wide parallel
    stays linear in its number of branches.

    The common case, every branch asking the same group and no branch pinned
    by another rule, has a fixed answer: round r (every worker holding r
    branches) visits the workers with more than r free slots, most free
    first; then the overflow goes out in proportion to capacity.
    :meth:`_rounds` yields exactly the sequence the heaps would, without
    their per-pick bookkeeping, until a second group or a hold appears.
    """

    def __init__(self, ledger: SlotLedger) -> None:
        self._ledger = ledger
        self._free = ledger.free
        self._capacity = ledger.capacity
        self._held: dict[str, int] = {}
        self._overflow: dict[str, int] = {}
        self._heaps: dict[tuple[int, bool], list[tuple[ScoreKey, WorkerInfo]]] = {}
        self._overflow_heaps: dict[int, list[tuple[OverflowKey, WorkerInfo]]] = {}
        self._only: tuple[int, bool] | None = None
        self._only_group: list[WorkerInfo] | None = None
        self._rounds_left: Iterator[tuple[WorkerInfo, int]] | None = None
        self.overflowed = 0

    def _key(self, worker: WorkerInfo, wants_gpu: bool) -> ScoreKey:
        return (
            self._held.get(worker.id, 0),
            -self._free[worker.id],
            *_tiebreak(worker, wants_gpu),
        )

    def pick(self, group: list[WorkerInfo], wants_gpu: bool) -> tuple[WorkerInfo, int]:
        """The best worker of ``group`` (non-empty) for the next branch, and its
        free slots before this branch took one (0: overflow, nothing was free)."""
        if self._rounds_left is not None and group is self._only_group:
            return next(self._rounds_left)
        heap_id = (id(group), wants_gpu)
        if self._rounds_left is not None and heap_id == self._only:
            return next(self._rounds_left)
        if self._only is None:
            self._only_group = group
            self._only = heap_id
            self._rounds_left = self._rounds(group, wants_gpu)
            return next(self._rounds_left)
        self._rounds_left = self._only_group = None  # mixed groups: the heaps take over
        heap = self._heaps.get(heap_id)
        if heap is None:
            heap = self._heaps[heap_id] = [(self._key(w, wants_gpu), w) for w in group]
            heapify(heap)
        free = self._free
        while heap:
            key, worker = heap[0]
            fresh = self._key(worker, wants_gpu)
            if fresh != key:
                heapreplace(heap, (fresh, worker))
                continue
            worker_id = worker.id
            before = free[worker_id]
            if before <= 0:
                # Full: it gets no slot back before this phase ends, so drop it.
                heappop(heap)
                continue
            self._ledger.take(worker_id)
            self._held[worker_id] = key[0] + 1
            heapreplace(heap, (self._key(worker, wants_gpu), worker))
            return worker, before
        self.overflowed += 1
        return self._overflow_pick(group), 0

    def _rounds(self, group: list[WorkerInfo], wants_gpu: bool) -> Iterator[tuple[WorkerInfo, int]]:
        ledger, free, held, overflow = self._ledger, self._free, self._held, self._overflow
        order = ledger.ranked(group, wants_gpu)
        start = {w.id: free[w.id] for w in order} if ledger.outstanding else ledger.capacity
        taken = 0
        while True:
            found = False
            for worker in order:
                worker_id = worker.id
                if start[worker_id] > taken:
                    found = True
                    free[worker_id] -= 1
                    ledger.outstanding += 1
                    held[worker_id] = taken + 1
                    yield worker, start[worker_id] - taken
            if not found:
                break
            taken += 1
        period = self._overflow_period(group)
        while True:
            for worker in period:
                overflow[worker.id] = overflow.get(worker.id, 0) + 1
                self.overflowed += 1
                yield worker, 0

    def _overflow_period(self, group: list[WorkerInfo]) -> list[WorkerInfo]:
        """One period of the overflow sequence, from no overflow yet.

        Picking the smallest ``(overflow + 1) / capacity`` (ties by id) is
        D'Hondt's rule with capacities as votes: the first ``sum(capacity)``
        picks give each worker exactly its capacity, and from there every
        key has grown by exactly 1, so the sequence repeats with that period.
        """
        capacity = self._capacity
        heap = [(1 / capacity[w.id], w.id, w) for w in group]
        heapify(heap)
        period: list[WorkerInfo] = []
        picked: dict[str, int] = {}
        for _ in range(sum(capacity[w.id] for w in group)):
            _, worker_id, worker = heap[0]
            count = picked[worker_id] = picked.get(worker_id, 0) + 1
            heapreplace(heap, ((count + 1) / capacity[worker_id], worker_id, worker))
            period.append(worker)
        return period

    def hold(self, worker: WorkerInfo) -> bool:
        """A branch placed by a rule stronger than load (differentiable, trial)
        still takes a slot on its worker; past capacity it counts as overflow.
        Whether a slot was taken."""
        if self._only is None:
            self._only = (0, False)  # no group can match: the heaps decide from now on
        self._rounds_left = None
        if self._free[worker.id] > 0:
            self._held[worker.id] = self._held.get(worker.id, 0) + 1
            self._ledger.take(worker.id)
            return True
        self._overflow[worker.id] = self._overflow.get(worker.id, 0) + 1
        self.overflowed += 1
        return False

    def _overflow_pick(self, group: list[WorkerInfo]) -> WorkerInfo:
        """All full: the worker whose overflow is smallest relative to its capacity."""
        heap = self._overflow_heaps.get(id(group))
        if heap is None:
            heap = self._overflow_heaps[id(group)] = [(self._overflow_key(w), w) for w in group]
            heapify(heap)
        while True:
            key, worker = heap[0]
            fresh = self._overflow_key(worker)
            if fresh == key:
                break
            heapreplace(heap, (fresh, worker))
        self._overflow[worker.id] = self._overflow.get(worker.id, 0) + 1
        heapreplace(heap, (self._overflow_key(worker), worker))
        return worker

    def _overflow_key(self, worker: WorkerInfo) -> OverflowKey:
        capacity = max(self._capacity[worker.id], 1)
        return ((self._overflow.get(worker.id, 0) + 1) / capacity, worker.id)

    def release_all(self) -> None:
        """The parallel phase is over: every slot it took goes back."""
        for worker_id, count in self._held.items():
            self._free[worker_id] += count
            self._ledger.outstanding -= count
        self._held.clear()
        self._rounds_left = None  # the generator refers back to this picker: drop the cycle
