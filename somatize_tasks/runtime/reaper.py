"""The reaper: runs survive a worker's death.

Celery on Redis strands work in a dead worker's queue (nothing else reads
it, and an unacked message only comes back to that same queue). So a run
is repaired from its own state, not from the broker:

Who watches
    The one worker holding the cluster's reaper lease sweeps every active
    run (:mod:`somatize_tasks.runtime.elected`), each producer's
    ``PlanRun.wait`` repairs its own run, and ``somatize-tasks reaper``
    runs one on its own. A lease per run
    (``<p>:run:<id>:lease``, ``SET NX PX``) lets one of them repair a run at
    a time; the others skip it.
What a repair does
    1. Finds the blocks of the run that are pending or running on a worker
       whose heartbeat expired.
    2. Moves every node the dead worker held to a live worker that
       satisfies its ``Remote`` target (the least loaded one; a dead
       worker's nodes move together, keeping rule 1), records the new
       distribution and bumps its version, so every process reloads it.
    3. Re-dispatches the stranded blocks under new task ids. Inputs already
       inline or in the shared store are reused; an input that lived only
       in the dead worker's cache is recomputed first, from its own saved
       input (recursively), and the block waits for it.
    4. Leaves the dead worker's queue alone (other runs' watchers may not
       have seen the death yet). A copy of an old message that runs later
       anyway (the worker came back, a redelivery) is refused by
       ``mark_running`` (task id mismatch), and if a duplicate completes
       anyway, the first result recorded wins.
What a dead dispatcher leaves
    Every dispatch is recorded with an outbox entry that is cleared once its
    messages are out. An entry older than ``outbox_grace`` means the process
    that dispatched died between recording and publishing (a worker killed
    just after a completion, a producer killed mid-publish): its blocks are
    dispatched again under new task ids.
What it cannot fix
    A node pinned (``WorkerId``) to the dead worker, or needing a tag no
    live worker has, fails the run after ``reroute_grace_s`` (the worker
    may come back). A node running past ``node_time_limit_s`` fails the run.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterable
from typing import Any

from redis import Redis

from scheduler import (
    DistributionPlan,
    Execute,
    ExecutionPlan,
    PlacementError,
    PlanNode,
    Remote,
    RemoteTarget,
    WorkerInfo,
    schedule,
)
from somatize_tasks.registry import Registry
from somatize_tasks.runtime.context import RunContext
from somatize_tasks.runtime.dispatch import CeleryDispatcher
from somatize_tasks.runtime.engine import Engine
from somatize_tasks.runtime.packing import unpack
from somatize_tasks.runtime.program import Block, Program
from somatize_tasks.runtime.redis_state import RedisRunState
from somatize_tasks.runtime.values import Expr, refs_in
from somatize_tasks.store import ArtifactRef

log = logging.getLogger(__name__)

UNFINISHED = ("pending", "running")
NOT_WORKERS = ("producer", "local", None)
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def outbox_grace(settings: Any) -> float:
    """How long a recorded dispatch may stay unconfirmed before it counts as lost."""
    return float(max(5.0, 2 * settings.heartbeat_ttl_s, 4 * settings.heartbeat_interval_s))


class StrandedError(Exception):
    """A node cannot be re-placed yet (no live worker satisfies its target)."""


class Reaper:
    """Repairs the runs of one Redis/key prefix; safe to run in many processes at once."""

    def __init__(
        self, context: RunContext, owner: str | None = None, *, alive: Iterable[str] = ()
    ) -> None:
        self.context = context
        self.settings = context.settings
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"
        # A worker's own reaper never takes its own worker for dead, even before
        # its first heartbeat is visible (a worker restarted under the same id).
        self.alive = frozenset(alive)
        self.registry = Registry.from_settings(context.settings, context.redis)
        self._release = context.redis.register_script(_RELEASE)

    def sweep(self) -> list[str]:
        """Repair every active run that needs it; the ids of the runs repaired."""
        live = self._live()
        repaired = []
        for raw in self.context.redis.smembers(self.context.keys.active_runs):
            run_id = raw.decode()
            if self.repair(run_id, live):
                repaired.append(run_id)
        return repaired

    def repair(self, run_id: str, live: dict[str, WorkerInfo] | None = None) -> bool:
        """Repair one run if no other watcher holds its lease; True if anything moved."""
        lease = self.context.keys.run(run_id, "lease")
        lease_ms = int(max(10.0, 5 * self.settings.heartbeat_ttl_s) * 1000)
        if not self.context.redis.set(lease, self.owner, nx=True, px=lease_ms):
            return False
        try:
            return _Repair(self, run_id, live if live is not None else self._live()).run()
        finally:
            self._release(keys=[lease], args=[self.owner])

    def _live(self) -> dict[str, WorkerInfo]:
        return {info.id: info for info in self.registry.live_infos()}


class _Repair:
    """One repair of one run (see the module docstring)."""

    def __init__(self, reaper: Reaper, run_id: str, live: dict[str, WorkerInfo]) -> None:
        self.reaper = reaper
        self.context = reaper.context
        self.run_id = run_id
        self.live = live
        self.alive = set(live) | reaper.alive
        self.state: RedisRunState = reaper.context.state(run_id)
        self.redis: Redis[bytes] = reaper.context.redis

    def run(self) -> bool:
        """Look at the run's state (two round trips when all is well); repair if needed.

        The plan is loaded and compiled only when something must move, so a
        sweep over many healthy runs stays cheap.
        """
        pipe = self.redis.pipeline()
        pipe.hmget(self.state.meta, "status", "created_at", "time_limits")
        pipe.hgetall(self.state.nodes)
        pipe.hlen(self.state.outbox)
        (status, created, limits), raw_nodes, in_outbox = pipe.execute()
        if status != b"running":
            self.redis.srem(self.context.keys.active_runs, self.run_id)
            return False
        nodes = {k.decode(): json.loads(v) for k, v in raw_nodes.items()}
        hard_limit_s = json.loads(limits or b"[null, null]")[1]
        if self._fail_overdue(hard_limit_s, nodes) or self._fail_stalled(created, nodes):
            return True
        if in_outbox and self._publish_unsent(nodes):
            return True
        stranded = self._stranded(nodes)
        starved, lost_sources = self._starved(nodes)
        if not stranded and not starved:
            return False
        dead = {nodes[n]["worker"] for n in stranded} | lost_sources
        try:
            program = self._replace(dead)
        except StrandedError as exc:
            self._fail_after_grace(str(exc), dead)
            return False
        dispatcher = CeleryDispatcher(
            self.context, self.run_id, program, self.state, unavailable=dead
        )
        blocks = {(nodes[n]["block"], nodes[n]["epoch"]) for n in stranded} | starved
        for bid, epoch in sorted(blocks):
            self._redispatch(program, dispatcher, program.blocks[bid], epoch)
        log.warning(
            "run %s: re-routed %s away from dead worker(s) %s",
            self.run_id,
            describe_blocks(program, sorted(blocks)),
            ", ".join(sorted(dead)),
        )
        return True

    def _publish_unsent(self, nodes: dict[str, dict[str, Any]]) -> bool:
        """Dispatch again what a dead dispatcher recorded but never published: the
        blocks of old outbox entries still pending under the entry's task id (the
        others ran after all, or were dispatched again since)."""
        before = time.time() - outbox_grace(self.reaper.settings)
        old = {k: e for k, e in self.state.unsent().items() if e["at"] < before}
        program = self.context.program(self.run_id) if old else None
        if program is None:
            return False
        unsent = [
            (bid, epoch) for (bid, epoch), entry in old.items()
            if any(nodes.get(n, {}).get("state") == "pending"
                   and nodes[n].get("task_id") == entry["task_id"]
                   for n in program.blocks[bid].task_node_ids())
        ]  # fmt: skip
        self.state.sent([key for key in old if key not in unsent])
        if not unsent:
            return False
        dispatcher = CeleryDispatcher(self.context, self.run_id, program, self.state)
        for bid, epoch in sorted(unsent):
            self._redispatch(program, dispatcher, program.blocks[bid], epoch)
        names = sorted({n for bid, _ in unsent for n in program.blocks[bid].task_node_ids()})
        log.warning("run %s: published again what a dead dispatcher never sent: %s",
                    self.run_id, ", ".join(names))  # fmt: skip
        return True

    # --- finding what is stuck ------------------------------------------------------

    def _stranded(self, nodes: dict[str, dict[str, Any]]) -> list[str]:
        return [
            node_id
            for node_id, status in nodes.items()
            if status.get("state") in UNFINISHED
            and status.get("worker") not in NOT_WORKERS
            and status.get("worker") not in self.alive
            and "block" in status
        ]

    def _starved(self, nodes: dict[str, dict[str, Any]]) -> tuple[set[tuple[int, int]], set[str]]:
        """Blocks waiting for a transfer whose source worker died, or for too long.

        A transfer chain whose message was lost (its source died before the
        upload ran, a download found nothing) would leave its block waiting
        forever; past ``transfer_stall_s`` the block is dispatched again.
        """
        starved: set[tuple[int, int]] = set()
        sources: set[str] = set()
        stall_before = time.time() - self.reaper.settings.transfer_stall_s
        for status in nodes.values():
            if status.get("waiting_for") != "transfers" or status.get("state") != "pending":
                continue
            key = (status["block"], status["epoch"])
            if key in starved:
                continue
            if status.get("queued_at", stall_before) < stall_before:
                starved.add(key)
                continue
            handled = set(status.get("avoiding", ()))  # re-dispatched around these already
            for ref in refs_in(self.state.load_input(*key)):
                source = ref.get("worker_id")
                if (
                    ref.get("inline") is None
                    and source not in NOT_WORKERS
                    and source not in self.alive
                    and source not in handled
                ):
                    starved.add(key)
                    sources.add(source)
        return starved, sources

    def _fail_stalled(self, created: bytes | None, nodes: dict[str, dict[str, Any]]) -> bool:
        """A running run with nothing pending or running for too long has lost a
        step (its worker died between recording a result and publishing the next).
        Fail it clearly rather than let its producer wait forever."""
        if any(s.get("state") in UNFINISHED for s in nodes.values()):
            return False
        seen = [t for s in nodes.values() for t in (s.get("ended_at"), s.get("queued_at")) if t]
        last = max([*seen, float(created or 0)])
        stall = self.reaper.settings.transfer_stall_s
        if time.time() - last < stall:
            return False
        self._fail(None, None, f"run {self.run_id} stalled: no node pending or running "
                   f"for {stall:g} s (a worker probably died between two steps); resubmit it",
                   "RunStalled")  # fmt: skip
        return True

    def _fail_overdue(self, limit: float | None, nodes: dict[str, dict[str, Any]]) -> bool:
        """A node running past its hard time limit was killed; fail its run."""
        if limit is None:
            return False
        slack = 2 * self.reaper.settings.heartbeat_ttl_s
        now = time.time()
        for node_id, status in nodes.items():
            started = status.get("started_at")
            if status.get("state") == "running" and started and now - started > limit + slack:
                message = (
                    f"node '{node_id}' ran past its time limit of {limit:g} s on worker "
                    f"'{status.get('worker')}' and was stopped"
                )
                self._fail(node_id, status.get("worker"), message, "NodeTimeLimitExceeded")
                return True
        return False

    # --- moving nodes -----------------------------------------------------------------

    def _replace(self, dead: set[str]) -> Program:
        """Move every node of the dead workers to live ones; store the new distribution.

        Returns the program compiled from it (every process reloads it: the
        distribution's version moves on).
        """
        program = self.context.program(self.run_id, refresh=True)
        if program is None:
            raise StrandedError(f"run {self.run_id} is no longer known to Redis")
        raw = self.redis.hget(self.state.meta, "distribution")
        distribution = DistributionPlan.model_validate_json(unpack(raw or b"{}"))
        chosen: dict[tuple[str, str], tuple[str, str]] = {}
        for assignment in distribution.assignments:
            if assignment.worker_id not in dead:
                continue
            block = program.block_of(assignment.node_id)
            target = program.target_of(block) if block is not None else None
            key = (assignment.worker_id, target.model_dump_json() if target else "")
            if key not in chosen:
                chosen[key] = self._new_home(assignment.node_id, assignment.worker_id, target)
            assignment.worker_id, assignment.worker_name = chosen[key]
            assignment.reason = f"re-placed: its worker died ({assignment.reason})"
        self.state.replace_distribution(distribution.model_dump_json())
        refreshed = self.context.program(self.run_id, refresh=True)
        assert refreshed is not None
        return refreshed

    def _new_home(self, node_id: str, old: str, target: RemoteTarget | None) -> tuple[str, str]:
        """Where the scheduler would put this node now: ``(worker id, name)``.

        Asks :func:`scheduler.schedule` itself (a one-node plan with the
        node's target), so re-placement follows the same filters and scores.
        """
        probe: PlanNode = Execute(node_id=node_id)
        if target is not None:
            probe = Remote(node_id=node_id, target=target, plan=probe)
        try:
            placed = schedule(ExecutionPlan.of(probe), list(self.live.values()))
        except PlacementError as exc:
            raise StrandedError(
                f"node '{node_id}' was on worker '{old}', which died, and needs "
                f"{target.describe() if target else 'a worker'}: no live worker can take it ({exc})"
            ) from None
        if not placed.assignments:
            raise StrandedError(
                f"node '{node_id}' was on worker '{old}', which died: no live worker left"
            )
        return placed.assignments[0].worker_id, placed.assignments[0].worker_name

    def _fail_after_grace(self, message: str, dead: Iterable[str]) -> None:
        since = self.state.first_noticed(",".join(sorted(dead)))
        grace = self.reaper.settings.reroute_grace_s
        if time.time() - since >= grace:
            self._fail(
                None,
                ",".join(sorted(dead)),
                f"{message} (waited {grace:g} s for it to come back)",
                "WorkerLost",
            )

    def _fail(self, node_id: str | None, worker: str | None, message: str, kind: str) -> None:
        detail = {
            "node_id": node_id,
            "worker_id": worker,
            "type": kind,
            "message": message,
            "traceback": "",
        }
        if self.state.finish("failed", error=detail):
            log.error("run %s failed: %s", self.run_id, message)

    # --- dispatching again ------------------------------------------------------------

    def _redispatch(
        self, program: Program, dispatcher: CeleryDispatcher, block: Block, epoch: int
    ) -> None:
        input_expr = self.state.load_input(block.index, epoch)
        producers = self._lost_producers(program, input_expr)
        if not producers:
            dispatcher.dispatch(block, epoch, input_expr)
            return
        # Inputs that lived only on the dead worker: recompute them first. The
        # block waits on its new worker under a new task id (no longer stranded).
        dispatcher.wait_for_recompute(block, epoch, [(p.index, e) for p, e in producers])
        for producer, producer_epoch in producers:
            self._redispatch(program, dispatcher, producer, producer_epoch)

    def _lost_producers(self, program: Program, input_expr: Expr) -> list[tuple[Block, int]]:
        lost: dict[tuple[int, int], tuple[Block, int]] = {}
        shared = self.context.store.shared
        for ref in refs_in(input_expr):
            if ref.get("inline") is not None or ref.get("worker_id") in self.alive:
                continue
            artifact = ArtifactRef.model_validate(ref)
            if shared.exists(artifact.key, artifact.size):
                continue
            block = program.block_of(artifact.node_id)
            if block is not None:
                lost[(block.index, artifact.iteration)] = (block, artifact.iteration)
        return list(lost.values())


def describe_blocks(program: Program, blocks: list[tuple[int, int]]) -> str:
    """Blocks as people know them: node ids, with the loop pass when not the first
    (``train_svm, evaluate (pass 2)``), never internal ``(block, epoch)`` pairs."""
    shown = []
    for bid, epoch in blocks:
        nodes = "+".join(program.blocks[bid].task_node_ids())
        shown.append(f"{nodes} (pass {epoch})" if epoch else nodes)
    return "node(s) " + ", ".join(shown)


def finish_recompute(
    context: RunContext,
    engine: Engine,
    dispatcher: CeleryDispatcher,
    block: Block,
    epoch: int,
    outputs: dict[str, Expr],
) -> bool:
    """After a recomputed block ran: hand its new outputs to the blocks waiting for them.

    Returns False when the block was not a recomputation (advance as usual).
    """
    state = dispatcher.state
    waiting = state.take_recompute(block.index, epoch, outputs)
    if waiting is None:
        return False
    new_refs = {
        (e["ref"]["node_id"], e["ref"].get("iteration", 0)): e
        for e in outputs.values()
        if "ref" in e
    }
    state.mark_nodes(block.task_node_ids(), "done", context.worker_id, epoch, recomputed=True)
    # The reaper moved nodes to get here: dispatch with the current distribution.
    program = context.program(dispatcher.run_id, refresh=True) or engine.program
    dispatcher = CeleryDispatcher(context, dispatcher.run_id, program, state)
    for bid, dependent_epoch in waiting:
        saved = state.load_input(bid, dependent_epoch)
        state.save_input(bid, dependent_epoch, _replace_refs(saved, new_refs))
        if state.recompute_arrived(bid, dependent_epoch):
            dependent = program.blocks[bid]
            dispatcher.dispatch(dependent, dependent_epoch, state.load_input(bid, dependent_epoch))
    return True


def _replace_refs(expr: Expr, new_refs: dict[tuple[str, int], Expr]) -> Expr:
    if "ref" in expr:
        key = (expr["ref"]["node_id"], expr["ref"].get("iteration", 0))
        return new_refs.get(key, expr)
    for kind in ("map", "graph"):
        if kind in expr:
            return {kind: {k: _replace_refs(v, new_refs) for k, v in expr[kind].items()}}
    return expr
