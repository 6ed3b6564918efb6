"""A batch's next block starts in the round trip that records the block before it.

A ``somatize.node.batch`` message runs its blocks one after another on one
worker, so block k+1 starts the moment block k is recorded. Its
``mark_running`` therefore rides in one pipeline with that record: one Redis
round trip less for every block of a batch after the first, which is most
branches of a wide fork-join. Everything else about the start is unchanged
(the same script, checks and reservation release); if the pipelined start
could not be sent, the block marks itself as usual.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis import Redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError


@dataclass
class PendingStart:
    """The ``mark_running`` call of the next block, and what it answered once sent."""

    keys: list[str]
    args: list[Any]
    sent: bool = False
    #: The run's distribution version; None when the block must not run.
    version: int | None = None
    #: This execution's fencing token: its values' keys and its record carry it.
    attempt: int = 0
    #: The block's status when this very task had started before (JSON): the
    #: earlier execution of this message died (runtime/recovery/deaths.py).
    previous: str | None = None

    def settle(self, reply: Any) -> None:
        """Take ``mark_running``'s answer: -1 (do not run) or [version, attempt, previous]."""
        self.sent = True
        if not isinstance(reply, list):
            self.version = None
            return
        version, attempt, previous = reply
        self.version, self.attempt = int(version), int(attempt)
        if previous:
            self.previous = previous.decode() if isinstance(previous, bytes) else str(previous)


def send_with_start(
    client: Redis[bytes],
    script: Script,
    keys: list[str],
    args: list[Any],
    start: PendingStart,
    mark: Script,
) -> Any:
    """``script(keys, args)``, then ``start``'s mark, in one round trip; the script's answer.

    Scripts Redis forgot (a restart, ``SCRIPT FLUSH``) are sent again on their own.
    """
    pipe = client.pipeline(transaction=False)
    pipe.evalsha(_sha(script), len(keys), *keys, *args)
    pipe.evalsha(_sha(mark), len(start.keys), *start.keys, *start.args)
    first, second = pipe.execute(raise_on_error=False)
    if isinstance(first, NoScriptError):
        first = script(keys=keys, args=args)
    elif isinstance(first, Exception):
        raise first
    _settle(start, second, mark)
    return first


def read_with_start(
    client: Redis[bytes], key: str, fields: tuple[str, ...], start: PendingStart, mark: Script
) -> list[bytes | None]:
    """``HMGET key fields``, then ``start``'s mark, in one round trip: a node task whose
    run's program this process has not compiled yet starts while it reads it (the
    first block of every run on every pool process)."""
    pipe = client.pipeline(transaction=False)
    pipe.hmget(key, *fields)
    pipe.evalsha(_sha(mark), len(start.keys), *start.keys, *start.args)
    raw, second = pipe.execute(raise_on_error=False)
    if isinstance(raw, Exception):
        raise raw
    _settle(start, second, mark)
    return list(raw)


def _settle(start: PendingStart, reply: Any, mark: Script) -> None:
    """Record what the pipelined mark answered (sent again alone if Redis forgot it)."""
    if isinstance(reply, NoScriptError):
        reply = mark(keys=start.keys, args=start.args)
    if not isinstance(reply, Exception):  # else the block marks itself when it runs
        start.settle(reply)


def _sha(script: Script) -> str:
    """The script's SHA1 (set by redis-py when the script is registered)."""
    return str(script.sha)  # type: ignore[attr-defined]
