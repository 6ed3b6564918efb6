"""A run's outbox in Redis (``<p>:run:<id>:outbox``): what was recorded but may not
have been carried out yet, so a watcher can carry it out if its process died.

Two kinds of entry share the hash:

``<bid>:<epoch>``
    a block recorded as dispatched whose messages are not known to be out yet
    (cleared once they are).
``c:<bid>:<epoch>``
    a completion's intent: written by the script that records a block's
    completion (or the one that completes a Parallel's join), atomically with
    it, and cleared in the pipeline that records the dispatch that follows (or
    by the join that still waits). It holds what the engine needs to redo its
    follow-up, so a process that dies between the two leaves a step the
    reaper can finish (:mod:`somatize_tasks.runtime.recovery.outbox`).
"""

from __future__ import annotations

import json
from typing import Any

from redis import Redis

from somatize_tasks.config.clock import redis_now
from somatize_tasks.runtime.compile.values import Expr
from somatize_tasks.runtime.state.seal import Seal, compact

INTENT = "c:"


def compact_json(value: Any) -> str:
    """JSON without spaces: what every field of a run's state holds."""
    return compact(value)


#: Fields in one ``HSET`` of :meth:`OutboxState.record_dispatches`.
HSET_FIELDS = 5000
#: The transfer log keeps this many records, the newest (as the history its events).
MAX_TRANSFERS = 20_000
#: One block dispatched: its node ids, block, pass, input, status, transfer records.
Dispatch = tuple[list[str], int, int, Expr, dict[str, Any], list[str]]


class OutboxState:
    """The outbox half of :class:`~somatize_tasks.runtime.state.redis_state.RedisRunState`."""

    client: Redis[bytes]
    outbox: str
    results: str
    nodes: str
    transfers: str
    ttl_s: int
    seal: Seal
    #: The intent this process's completion left and its follow-up has not cleared yet.
    intent: str | None = None
    #: (worker id, task id) of the task completing blocks here; written into its
    #: intents, so a watcher leaves alone one whose task its worker still holds.
    owner: tuple[str, str] | None = None

    def _into_outbox(self, pipe: Any, bid: int, epoch: int, task_id: str) -> None:
        entry = compact_json({"task_id": task_id, "at": redis_now(self.client)})
        pipe.hset(self.outbox, f"{bid}:{epoch}", entry)
        pipe.expire(self.outbox, self.ttl_s)
        self._clear_intent(pipe)

    def record_dispatches(self, dispatches: list[Dispatch], pipe: Any) -> None:
        """:meth:`~somatize_tasks.runtime.state.redis_state.RedisRunState.record_dispatch`
        for many blocks that wait for no transfer, into ``pipe``: their inputs, statuses
        and outbox entries as a few ``HSET`` of many fields each (a wide fan-out's
        200,000 blocks were 1.6 million commands, most of its submission time)."""
        now = compact_json(redis_now(self.client))
        inputs: dict[str, str] = {}
        statuses: dict[str, str] = {}
        entries: dict[str, str] = {}
        logged: list[str] = []
        texts: dict[int, str] = {}  # a fan-out's blocks share one input: encoded once
        for nodes, bid, epoch, expr, status, transfers in dispatches:
            field = f"i:{bid}:{epoch}"
            text = texts.get(id(expr))
            if text is None:
                text = texts[id(expr)] = compact(expr)
            inputs[field] = self.seal.close_text(field, text)
            statuses.update(dict.fromkeys(nodes, compact_json(status)))
            entries[f"{bid}:{epoch}"] = f'{{"task_id":{json.dumps(status["task_id"])},"at":{now}}}'
            logged += transfers
        for key, mapping in (
            (self.results, inputs),
            (self.nodes, statuses),
            (self.outbox, entries),
        ):
            items = list(mapping.items())
            for start in range(0, len(items), HSET_FIELDS):
                pipe.hset(key, mapping=dict(items[start : start + HSET_FIELDS]))
            pipe.expire(key, self.ttl_s)
        if logged:
            pipe.rpush(self.transfers, *logged)
            pipe.ltrim(self.transfers, -MAX_TRANSFERS, -1)
            pipe.expire(self.transfers, self.ttl_s)
        self._clear_intent(pipe)

    def sent(self, blocks: list[tuple[int, int]], pipe: Any = None) -> None:
        """These blocks' messages are out: the outbox forgets them (with ``pipe``, in
        the transaction that publishes them)."""
        if blocks:
            target = self.client if pipe is None else pipe
            target.hdel(self.outbox, *(f"{bid}:{epoch}" for bid, epoch in blocks))

    def unsent(self) -> dict[tuple[int, int], dict[str, Any]]:
        """Blocks recorded as dispatched whose messages were never confirmed sent."""
        return self._entries("")

    def intents(self) -> dict[tuple[int, int], dict[str, Any]]:
        """Completions whose follow-up was not recorded (yet), by (block, epoch)."""
        return self._entries(INTENT)

    def _entries(self, kind: str) -> dict[tuple[int, int], dict[str, Any]]:
        found = {}
        for field, value in self.client.hgetall(self.outbox).items():
            name = field.decode()
            if name.startswith(INTENT) == bool(kind):
                bid, epoch = name.removeprefix(INTENT).split(":")
                entry = json.loads(value)
                if kind and isinstance(entry.get("o"), dict):
                    entry["o"] = self.seal.open(f"intent:{bid}:{epoch}", json.dumps(entry["o"]))
                found[int(bid), int(epoch)] = entry
        return found

    # --- completion intents ----------------------------------------------------------

    def _intent_args(self, bid: int, epoch: int, **follow_up: Any) -> list[str]:
        """The two script arguments that leave an intent; remembered to clear later."""
        self.intent = f"{INTENT}{bid}:{epoch}"
        owner = {"w": self.owner[0], "t": self.owner[1]} if self.owner else {}
        if follow_up.get("o") is not None:  # the output the redo hands on: sealed
            follow_up["o"] = json.loads(self.seal.close(f"intent:{bid}:{epoch}", follow_up["o"]))
        return [self.intent, compact_json({"at": redis_now(self.client), **owner, **follow_up})]

    def _clear_intent(self, pipe: Any) -> None:
        """The follow-up is being recorded in ``pipe``: the intent goes with it."""
        if self.intent is not None:
            pipe.hdel(self.outbox, self.intent)
            self.intent = None

    def follow_up_done(self) -> None:
        """The engine's follow-up ended without recording a dispatch (the run ended,
        or the follow-up failed): drop the intent, if one is left."""
        if self.intent is not None:
            self.client.hdel(self.outbox, self.intent)
            self.intent = None

    def claim_intent(self, bid: int, epoch: int) -> bool:
        """Take an intent to redo its follow-up: True for exactly one watcher."""
        return bool(self.client.hdel(self.outbox, f"{INTENT}{bid}:{epoch}"))

    def join_slots(self, bid: int, epoch: int) -> list[Expr] | None:
        """A Parallel's joined branch outputs (in order), None unless every one is in."""
        total, left = self.client.hmget(self.results, [f"jt:{bid}:{epoch}", f"jn:{bid}:{epoch}"])
        if total is None or int(left or 0) != 0:
            return None
        raw = self.client.hmget(self.results, [f"j:{bid}:{epoch}:{i}" for i in range(int(total))])
        if any(value is None for value in raw):
            return None
        return self._slots(bid, epoch, [value for value in raw if value is not None])

    def _slots(self, bid: int, epoch: int, raw: list[bytes]) -> list[Expr]:
        """A join's branch outputs, each MAC checked (runtime/state/seal.py)."""
        return [self.seal.open(f"j:{bid}:{epoch}:{i}", value) for i, value in enumerate(raw)]
