"""What a dead dispatcher recorded but never published: the outbox.

Every dispatch is recorded with an outbox entry (``<p>:run:<id>:outbox``)
that is cleared once its messages are out. An entry older than
:func:`outbox_grace` means the process that dispatched died between
recording and publishing (a worker killed just after a completion, a
producer killed mid-publish): its blocks, if still pending under the
entry's task id, are dispatched again under new task ids.

A completion's intent (``c:<bid>:<epoch>``, :mod:`~somatize_tasks.runtime.state.outbox_state`)
older than the same grace means the process died between recording a
completion and recording what it made ready: a watcher claims it (one
``HDEL``, so exactly one does) and redoes the engine's follow-up from what it
kept. A follow-up that had partly happened is harmless to redo: a block
dispatched twice runs under the newer task id (``mark_running`` refuses the
older message), and the first completion recorded wins.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from somatize_tasks.config.clock import redis_now
from somatize_tasks.runtime.compile.program import Program
from somatize_tasks.runtime.engine.engine import Engine
from somatize_tasks.runtime.state.redis_state import RedisRunState


def outbox_grace(settings: Any) -> float:
    """How long a recorded dispatch may stay unconfirmed before it counts as lost."""
    return float(max(5.0, 2 * settings.heartbeat_ttl_s, 4 * settings.heartbeat_interval_s))


def unsent_blocks(
    state: RedisRunState,
    load: Callable[[], Program | None],
    nodes: dict[str, dict[str, Any]],
    grace_s: float,
) -> tuple[Program | None, list[tuple[int, int]]]:
    """The blocks of old outbox entries still pending under the entry's task id (the
    others ran after all, or were dispatched again since: the outbox forgets them),
    with the run's program (``load``ed only when there are old entries)."""
    before = redis_now(state.client) - grace_s  # entries are stamped on Redis' clock
    old = {k: e for k, e in state.unsent().items() if e["at"] < before}
    program = load() if old else None
    if program is None:
        return None, []
    unsent = [
        (bid, epoch)
        for (bid, epoch), entry in old.items()
        if any(
            nodes.get(n, {}).get("state") == "pending"
            and nodes[n].get("task_id") == entry["task_id"]
            for n in program.blocks[bid].task_node_ids()
        )
    ]
    state.sent([key for key in old if key not in unsent])
    return program, sorted(unsent)


def stale_intents(
    state: RedisRunState,
    grace_s: float,
    held: Callable[[set[str]], dict[str, Any]],
    live: set[str],
) -> dict[tuple[int, int], dict[str, Any]]:
    """Completion intents older than ``grace_s`` whose process died before its follow-up.

    One whose task a ``live`` worker still reports holding (``held``: worker id ->
    the task ids it holds, or None) is not stale but slow: its process is alive
    and will record the follow-up itself (a redo could then race it). A dead
    worker's last report still names the task it died running: not asked.
    """
    before = redis_now(state.client) - grace_s
    old = {key: entry for key, entry in state.intents().items() if entry["at"] < before}
    owners = {str(entry["w"]) for entry in old.values() if entry.get("w")} & live
    reports = held(owners) if owners else {}
    return {
        key: entry
        for key, entry in old.items()
        if entry.get("t") not in (reports.get(str(entry.get("w"))) or ())
    }


def redo_follow_up(
    state: RedisRunState, engine: Engine, bid: int, epoch: int, entry: dict[str, Any]
) -> bool:
    """Claim one stale intent and redo its follow-up; False if another watcher had it
    (or, for a join, its branches are gone: the run ended meanwhile)."""
    if not state.claim_intent(bid, epoch):
        return False
    engine.redoing = True
    if "j" not in entry:
        engine.follow_up(bid, epoch, entry["o"], entry.get("l"), entry.get("h"))
        return True
    slots = state.join_slots(bid, epoch)
    if slots is None:
        return False
    engine.joined(bid, epoch, slots)
    return True
