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

from somatize_tasks.runtime.compile.values import Expr

_NODE = "__somatize_node__"
_STARTED = "__somatize_started__"
_FINISHED = "__somatize_finished__"
_OUTPUTS = "__somatize_outputs__"


def tag_failure(
    exc: BaseException,
    node_id: str,
    started: float,
    finished: dict[str, list[float]],
    outputs: dict[str, Expr],
) -> None:
    """Record on ``exc`` that ``node_id`` raised it after ``finished`` had run."""
    setattr(exc, _NODE, node_id)
    setattr(exc, _STARTED, started)
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
    return TaskFailure(node, getattr(exc, _STARTED, None), time.time(), done, outputs, after)


def failed_node(exc: BaseException) -> str | None:
    """The node a tagged exception names (None: untagged)."""
    found = getattr(exc, _NODE, None)
    return found if isinstance(found, str) else None
