"""What the reaper looks for in one run's node statuses: the detection rules.

Each rule reads the node statuses of one sweep (``<p>:run:<id>:nodes``,
already fetched) and says what it found; none of them writes. Acting on a
finding (failing the run, re-dispatching) is :mod:`somatize_tasks.runtime.recovery.reaper`'s
job. The rules that end a run return a :class:`Failure`.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass
from typing import Any

from somatize_tasks.runtime.compile.values import refs_in
from somatize_tasks.runtime.state.redis_state import RedisRunState

UNFINISHED = ("pending", "running")
NOT_WORKERS = ("producer", "local", None)
#: At most this many unfinished nodes are named in a deadline error (then a count).
NAMED_MAX = 10

Nodes = dict[str, dict[str, Any]]


@dataclass(frozen=True)
class Failure:
    """Why a run must end now: what its error will say."""

    node_id: str | None
    worker_id: str | None
    message: str
    kind: str

    def detail(self) -> dict[str, Any]:
        """The JSON the run keeps as its error (see ``engine.failure_detail``)."""
        return {
            "node_id": self.node_id,
            "worker_id": self.worker_id,
            "type": self.kind,
            "message": self.message,
            "traceback": "",
        }


def stranded(nodes: Nodes, alive: Container[str]) -> list[str]:
    """Nodes pending or running on a worker whose heartbeat expired."""
    return [
        node_id
        for node_id, status in nodes.items()
        if status.get("state") in UNFINISHED
        and status.get("worker") not in NOT_WORKERS
        and status.get("worker") not in alive
        and "block" in status
    ]


@dataclass
class Starved:
    """Blocks waiting for their transfers that must go out again: ``blocks`` (all),
    ``waited`` (those that waited too long), ``sources`` (their dead source workers)."""

    blocks: set[tuple[int, int]]
    waited: set[tuple[int, int]]
    sources: set[str]


def starved(
    state: RedisRunState, nodes: Nodes, alive: Container[str], stall_before: float
) -> Starved:
    """Blocks waiting for a transfer whose source worker died, or for too long
    (queued before ``stall_before``), and the dead source workers.

    A transfer chain whose message was lost (its source died before the
    upload ran, a download found nothing) would leave its block waiting
    forever; past ``transfer_stall_s`` the block is dispatched again (and
    :func:`stalled_too_often` ends the run when that keeps happening).
    """
    found: set[tuple[int, int]] = set()
    waited: set[tuple[int, int]] = set()
    sources: set[str] = set()
    for status in nodes.values():
        if status.get("waiting_for") != "transfers" or status.get("state") != "pending":
            continue
        key = (status["block"], status["epoch"])
        if key in found:
            continue
        if status.get("queued_at", stall_before) < stall_before:
            found.add(key)
            waited.add(key)
            continue
        handled = set(status.get("avoiding", ()))  # re-dispatched around these already
        for ref in refs_in(state.load_input(*key)):
            source = ref.get("worker_id")
            if (
                ref.get("inline") is None
                and source not in NOT_WORKERS
                and source not in alive
                and source not in handled
            ):
                found.add(key)
                sources.add(source)
    return Starved(found, waited, sources)


def stalled_too_often(
    nodes: Nodes, key: tuple[int, int], times: int, limit: int, stall_s: float
) -> Failure | None:
    """A block whose transfers never came ``limit`` times in a row (say its worker
    reaches Redis but not the object store, whose packets vanish): without this,
    each re-dispatch meets the same fate and the run waits forever."""
    if times < limit:
        return None
    bid, epoch = key
    names = sorted(
        n for n, s in nodes.items() if s.get("block") == bid and s.get("epoch", 0) == epoch
    )
    worker = next((nodes[n].get("worker") for n in names if nodes[n].get("worker")), None)
    return Failure(
        names[0] if names else None,
        worker,
        f"node(s) {', '.join(names)} on worker '{worker}' waited for their inputs "
        f"{times} times {stall_s:g} s and the transfers never arrived: check that the "
        "worker reaches the object store (SOMATIZE_S3_ENDPOINT_URL) and the other workers",
        "TransferStalled",
    )


def stalled(
    run_id: str, created: float, nodes: Nodes, now: float, stall_s: float
) -> Failure | None:
    """A running run with nothing pending or running for too long has lost a step
    (its worker died between recording a result and publishing the next)."""
    if any(s.get("state") in UNFINISHED for s in nodes.values()):
        return None
    seen = [t for s in nodes.values() for t in (s.get("ended_at"), s.get("queued_at")) if t]
    if now - max([*seen, created]) < stall_s:
        return None
    return Failure(
        None,
        None,
        f"run {run_id} stalled: no node pending or running for "
        f"{stall_s:g} s (a worker probably died between two steps); resubmit it",
        "RunStalled",
    )


def overdue(limit_s: float | None, nodes: Nodes, now: float, slack_s: float) -> Failure | None:
    """A node running past its hard time limit was killed by its worker."""
    if limit_s is None:
        return None
    for node_id, status in nodes.items():
        started = status.get("started_at")
        if status.get("state") == "running" and started and now - started > limit_s + slack_s:
            worker = status.get("worker")
            return Failure(
                node_id,
                worker,
                f"node '{node_id}' ran past its time limit of "
                f"{limit_s:g} s on worker '{worker}' and was stopped",
                "NodeTimeLimitExceeded",
            )
    return None


def past_deadline(
    run_id: str,
    deadline_at: float | None,
    deadline_s: float | None,
    nodes: Nodes,
    node_ids: list[str],
    now: float,
) -> Failure | None:
    """The run's deadline passed: fail it, naming what was still unfinished
    (nodes running or queued, with their workers, and how many never started)."""
    if deadline_at is None or now < deadline_at:
        return None
    unfinished = [
        f"'{n}' ({s['state']} on worker '{s.get('worker')}')"
        for n, s in sorted(nodes.items())
        if s.get("state") in UNFINISHED
    ]
    waiting = len([n for n in node_ids if n not in nodes])
    named = unfinished[:NAMED_MAX]
    if len(unfinished) > NAMED_MAX:
        named.append(f"{len(unfinished) - NAMED_MAX} more")
    if waiting:
        named.append(f"{waiting} node(s) not started yet")
    first = next((n for n, s in sorted(nodes.items()) if s.get("state") in UNFINISHED), None)
    worker = nodes[first].get("worker") if first else None
    return Failure(
        first,
        worker,
        f"run {run_id} passed its deadline of {deadline_s:g} s; "
        f"still unfinished: {', '.join(named) or 'nothing'}",
        "RunDeadlineExceeded",
    )
