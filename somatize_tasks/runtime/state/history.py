"""A run's history: every attempt of every node, in order, in one bounded Redis list.

Why it exists: the run state keeps one record per node, its latest. By the
time anyone draws a run, a node's first attempt on a worker that died, and
every loop pass but the last, are gone. The timeline, the dashboard and the
Soma export read this list to show what really happened.

One list per run, ``<p>:run:<id>:history``. A block's start and end events
ride in the scripts that mark it running and record its result (no round
trip of their own); a failure is pushed on its own. Each write is ``RPUSH``,
``LTRIM`` to the newest :data:`MAX_EVENTS` and ``EXPIRE`` to the run's TTL,
so the list is bounded and goes away with the run. When the run ends, the
list is folded into the run's meta, compressed (:mod:`somatize_tasks.runtime.state.archive`);
:func:`read_events` reads both. A failure's line is best effort: losing it
must never fail a node.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import Any

from redis import Redis
from redis.exceptions import RedisError

from somatize_tasks.config.clock import redis_now
from somatize_tasks.config.keys import RedisKeys
from somatize_tasks.runtime.state.archive import FIELDS, log_lines
from somatize_tasks.runtime.state.failures import failure_of

log = logging.getLogger(__name__)

MAX_EVENTS = 20_000
LOST = "lost"  # an attempt that never ended: its worker died, the block ran again elsewhere


def history_key(keys: RedisKeys, run_id: str) -> str:
    return keys.run(run_id, "history")


def start_line(worker_id: str, nodes: list[str], epoch: int, now: float | None = None) -> str:
    """The ``running`` event of a block, written by the script that marks it running
    (``now``: Redis' time, :mod:`somatize_tasks.config.clock`)."""
    return _lines(worker_id, [{"nodes": nodes, "state": "running", "epoch": epoch}], now)[0]


def done_lines(
    worker_id: str,
    nodes: list[str],
    epoch: int,
    times: dict[str, list[float]],
    ended_at: float,
    cached: Collection[str] = (),
) -> list[str]:
    """The ``done`` events of a block, written by the script that records its result:
    one per node with its own times when the task ran several (a fused chain). A node
    served from the content cache says ``"cached": true``. ``ended_at`` is on the
    clock ``times`` were measured with (Redis' on a worker)."""
    if len(nodes) == 1 or not times:  # the event's own time says when it ended
        event: dict[str, Any] = {"nodes": nodes, "state": "done", "epoch": epoch}
        if nodes and all(n in cached for n in nodes):
            event["cached"] = True
        return _lines(worker_id, [event], ended_at)
    events: list[dict[str, Any]] = []
    for n in nodes:
        event = {"nodes": [n], "state": "done", "epoch": epoch}
        event.update(
            {"started_at": times[n][0], "ended_at": times[n][1]}
            if n in times
            else {"ended_at": ended_at}
        )
        if n in cached:
            event["cached"] = True
        events.append(event)
    return _lines(worker_id, events, ended_at)


def _lines(worker_id: str, events: list[dict[str, Any]], now: float | None = None) -> list[str]:
    """Compact JSON lines, stamped ``now`` (this machine's time if not given); ``epoch``
    0 (outside any loop) is left out, as readers assume."""
    now = time.time() if now is None else now
    return [
        json.dumps(
            {
                "at": now,
                "worker": worker_id,
                **{k: v for k, v in event.items() if not (k == "epoch" and v == 0)},
            },
            separators=(",", ":"),
        )
        for event in events
    ]


@dataclass(frozen=True)
class HistoryLog:
    """Where a worker writes a run's events: the Redis, its keys, and how long they live."""

    redis: Redis[bytes]
    keys: RedisKeys
    worker_id: str
    ttl_s: int


def _push(log_to: HistoryLog, run_id: str, events: list[dict[str, Any]]) -> None:
    key = history_key(log_to.keys, run_id)
    try:
        lines = _lines(log_to.worker_id, events, redis_now(log_to.redis))
        pipe = log_to.redis.pipeline(transaction=False)
        pipe.rpush(key, *lines)
        pipe.ltrim(key, -MAX_EVENTS, -1)
        pipe.expire(key, log_to.ttl_s)
        pipe.execute()
    except RedisError as exc:
        log.warning("run %s: %d history event(s) not recorded: %s", run_id, len(events), exc)


def record_failure(
    log_to: HistoryLog, run_id: str, nodes: list[str], epoch: int, exc: BaseException
) -> None:
    """A block raised. As if each node of a fused chain had been a task of its own:
    the nodes that finished before are done with their own times, the node that
    raised failed from its own start; the nodes after it never ran and get no bar."""
    failure = failure_of(exc, nodes)
    events: list[dict[str, Any]] = [
        {"nodes": [n], "state": "done", "epoch": epoch, "started_at": s, "ended_at": e}
        for n, (s, e) in failure.done.items()
    ]
    failed: dict[str, Any] = {
        "nodes": [failure.node],
        "state": "failed",
        "epoch": epoch,
        "error": f"{type(exc).__name__}: {exc}",
        "ended_at": failure.ended_at,
    }
    if failure.started_at is not None:
        failed["started_at"] = failure.started_at
    events.append(failed)
    if failure.after:
        events.append(
            {"nodes": failure.after, "state": "cancelled", "epoch": epoch, "dropped": True}
        )
    _push(log_to, run_id, events)


def read_events(client: Redis[bytes], keys: RedisKeys, run_id: str) -> list[dict[str, Any]]:
    """The run's events, oldest first (empty for a run from before this module):
    those folded into its meta when it ended, then any pushed since, in one transaction."""
    pipe = client.pipeline()
    pipe.hget(keys.run(run_id), FIELDS["history"])
    pipe.lrange(history_key(keys, run_id), 0, -1)
    archived, live = pipe.execute()
    return [json.loads(raw) for raw in log_lines(archived, live)]


@dataclass(frozen=True)
class Attempt:
    """One try of one node in one loop pass: where, when, and how it ended."""

    node_id: str
    worker: str
    epoch: int
    start: float
    end: float | None  # None: still running
    state: str  # running, done, cached (done from the content cache), failed, lost
    error: str | None = None
    number: int = 1  # 1 for the first try of this node in this pass

    @property
    def key(self) -> tuple[str, int]:
        return (self.node_id, self.epoch)


def attempts(events: list[dict[str, Any]]) -> list[Attempt]:
    """Fold events into attempts. A second start of a node in the same pass
    closes the first one as :data:`LOST` (it never reported: its worker died)."""
    done: list[Attempt] = []
    open_: dict[tuple[str, int], Attempt] = {}
    tries: dict[tuple[str, int], int] = {}
    for event in events:
        at = float(event.get("at", 0.0))
        epoch = int(event.get("epoch", 0))
        worker = str(event.get("worker", "?"))
        state = str(event.get("state"))
        for node_id in event.get("nodes", []):
            key = (str(node_id), epoch)
            current = open_.pop(key, None)
            if state == "running":
                if current is not None:
                    done.append(replace(current, end=at, state=LOST))
                tries[key] = tries.get(key, 0) + 1
                open_[key] = Attempt(key[0], worker, epoch, at, None, "running", number=tries[key])
                continue
            if event.get("dropped"):
                continue  # part of a block that stopped before it: no attempt to draw
            if current is None:  # its start was never recorded (trimmed, or older code)
                tries[key] = tries.get(key, 0) + 1
                start = float(event.get("started_at") or at)
                current = Attempt(key[0], worker, epoch, start, None, state, number=tries[key])
            start = float(event.get("started_at") or current.start)  # a fused node's own
            end = float(event.get("ended_at") or at)
            state = "cached" if event.get("cached") else state
            done.append(
                replace(
                    current, start=start, end=max(end, start), state=state, error=event.get("error")
                )
            )
    done.extend(open_.values())
    return sorted(done, key=lambda a: (a.start, a.node_id))
