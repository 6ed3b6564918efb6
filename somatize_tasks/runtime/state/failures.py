"""Which node of a task failed, and what the task's other nodes had done by then.

A task may run several nodes: a fused chain (consecutive Executes of a
Sequence placed on one worker, run as one task) or a Composite. When one
of them raises, the task body tags the exception (:func:`tag_failure`) with
the node that raised, when it started, and the nodes that had finished
before it (their times and outputs). :func:`failure_of` reads it back, so
the engine, the run history and every view built on them report the chain
exactly as the same nodes run one task each would be reported: the nodes
before are done, with their own times and outputs; the failing node is
failed, with its own start and its own error; the nodes after never ran.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from redis import Redis

from somatize_tasks.runtime.compile.values import Expr
from somatize_tasks.runtime.state.outbox_state import compact_json
from somatize_tasks.runtime.state.run_state import DONE
from somatize_tasks.runtime.state.seal import Seal

_NODE = "__somatize_node__"
_STARTED = "__somatize_started__"
_ENDED = "__somatize_ended__"
_FINISHED = "__somatize_finished__"
_OUTPUTS = "__somatize_outputs__"


def tag_failure(
    exc: BaseException,
    node_id: str,
    started: float,
    finished: dict[str, list[float]],
    outputs: dict[str, Expr],
    ended: float | None = None,
) -> None:
    """Record on ``exc`` that ``node_id`` raised it after ``finished`` had run; ``ended``
    (when it raised) on the clock ``started`` was read from (Redis' on a worker)."""
    setattr(exc, _NODE, node_id)
    setattr(exc, _STARTED, started)
    setattr(exc, _ENDED, ended)
    setattr(exc, _FINISHED, dict(finished))
    setattr(exc, _OUTPUTS, {n: e for n, e in outputs.items() if n in finished})


@dataclass(frozen=True)
class TaskFailure:
    """A failed task's nodes, sorted: ``done`` before ``node``, which failed; ``after``."""

    node: str
    started_at: float | None
    ended_at: float
    done: dict[str, list[float]] = field(default_factory=dict)
    outputs: dict[str, Expr] = field(default_factory=dict)
    after: list[str] = field(default_factory=list)


def failure_of(exc: BaseException, nodes: list[str]) -> TaskFailure:
    """What the task's ``nodes`` did, from a tagged exception; an untagged one (it
    failed before any node ran: a message that cannot be read, a lost input) is
    blamed on the first node."""
    node = getattr(exc, _NODE, None) or nodes[0]
    done: dict[str, list[float]] = dict(getattr(exc, _FINISHED, {}) or {})
    outputs: dict[str, Any] = dict(getattr(exc, _OUTPUTS, {}) or {})
    after = [n for n in nodes if n != node and n not in done]
    ended = getattr(exc, _ENDED, None)
    ended = time.time() if ended is None else ended
    return TaskFailure(node, getattr(exc, _STARTED, None), ended, done, outputs, after)


def failed_node(exc: BaseException) -> str | None:
    """The node a tagged exception names (None: untagged)."""
    found = getattr(exc, _NODE, None)
    return found if isinstance(found, str) else None


class FailureState:
    """Mixed into :class:`~somatize_tasks.runtime.state.redis_state.RedisRunState`: what
    a failed task's other nodes did, recorded as their own completions would be."""

    client: Redis[bytes]
    seal: Seal
    ttl_s: int
    nodes: str
    done: str
    latest_outputs: str

    def record_finished(
        self, times: dict[str, list[float]], outputs: dict[str, Expr], worker_id: str, epoch: int
    ) -> None:
        pipe = self.client.pipeline()
        statuses: dict[str | bytes, bytes | float | int | str] = {
            node_id: compact_json(
                {
                    "state": DONE,
                    "worker": worker_id,
                    "epoch": epoch,
                    "started_at": started,
                    "ended_at": ended,
                }
            )
            for node_id, (started, ended) in times.items()
        }
        pipe.hset(self.nodes, mapping=statuses)
        pipe.sadd(self.done, *times)
        if outputs:
            latest: dict[str | bytes, bytes | float | int | str] = {
                n: self.seal.close(f"latest:{n}", e) for n, e in outputs.items()
            }
            pipe.hset(self.latest_outputs, mapping=latest)
            pipe.expire(self.latest_outputs, self.ttl_s)
        pipe.expire(self.done, self.ttl_s)
        pipe.execute()

    def forget_nodes(self, nodes: list[str]) -> None:
        if nodes:
            self.client.hdel(self.nodes, *nodes)
