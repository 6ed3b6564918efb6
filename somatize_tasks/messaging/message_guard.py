"""The worker's first look at every task message: refuse what is malformed or unsigned.

Celery hands a received message to the task's strategy in the worker's main
process; a body that is not ``[args, kwargs, embed]`` (``[1]``, or a body
with an empty content type, read as a string) raises there, outside any
handler, and Celery stops the worker ("Unrecoverable error"). Worse, the
message is restored to its queue at shutdown, so the next worker dies too.

:class:`GuardedConsumer` (Celery's ``worker_consumer``) checks each message
before the strategy sees it: it must be a protocol 2 task message (``task``
and ``id`` headers) whose body decodes to ``[list, dict, dict]``, and, when
this worker has message keys, carry a valid version 2 signature (over the body and
every header a worker acts on; :mod:`somatize_tasks.messaging.signing`) and an id
that no live worker took before, within its expiry
(:mod:`somatize_tasks.messaging.replay`). Anything else is logged in one line (task
name, id, why) and dropped: rejected without requeue, never run, never
retried. Any other error the strategy raises for one message is handled
the same way, so one message can never stop the worker; connection errors
still propagate, as Celery needs them to reconnect.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery.worker import state as worker_state
from celery.worker.consumer import Consumer

from somatize_tasks.config.connections import redis_client
from somatize_tasks.messaging.celery_app import settings_of
from somatize_tasks.messaging.replay import ReplayGuard
from somatize_tasks.messaging.signing import check2, message_guard_of, verification_keys

log = logging.getLogger(__name__)
#: How much of a malformed message's error a log line quotes.
REASON_MAX_CHARS = 200


def _body_problem(message: Any) -> tuple[Any, str | None]:
    """The decoded body, or why it is not a task body."""
    if not message.content_type:
        return None, "no content type"
    try:
        body = message.decode()
    except Exception as exc:  # kombu wraps decoder errors in many types
        return None, f"undecodable body ({type(exc).__name__}: {exc})"
    shape_ok = (
        isinstance(body, list | tuple)
        and len(body) == 3
        and isinstance(body[0], list | tuple)
        and isinstance(body[1], dict)
        and isinstance(body[2], dict | None)
    )
    return body, None if shape_ok else "body is not [args, kwargs, embed]"


def problem_with(message: Any, keys: list[bytes], replays: ReplayGuard | None = None) -> str | None:
    """Why ``message`` must not run, or None. With ``replays``, a signed message is
    also refused when it expired or a live worker took its id already."""
    headers = message.headers
    if not isinstance(headers, dict) or not headers.get("task") or not headers.get("id"):
        return "not a task message (no task or id header)"
    body, problem = _body_problem(message)
    if problem is not None:
        return problem
    if not keys:
        return None
    problem = check2(keys, headers, body)
    guard = message_guard_of(headers)
    if problem is not None or replays is None or guard is None:
        return problem
    return replays.take(guard[0], guard[1], str(headers["id"]))


def held_here(task_id: str) -> bool:
    """Whether this worker process holds ``task_id`` (received, not yet finished)."""
    requests = [*worker_state.reserved_requests, *worker_state.active_requests]
    return any(request.id == task_id for request in requests)


def refuse(message: Any, reason: str, errors: tuple[type[BaseException], ...]) -> None:
    """One log line, then drop the message (reject without requeue acks it in Redis)."""
    headers = message.headers if isinstance(message.headers, dict) else {}
    task, task_id = headers.get("task", "?"), headers.get("id", "?")
    if len(reason) > REASON_MAX_CHARS:
        reason = reason[: REASON_MAX_CHARS - 3] + "..."
    log.error("refused message %s id=%s: %s; dropped, not run", task, task_id, reason)
    message.reject_log_error(log, errors)


class GuardedConsumer(Consumer):
    """Celery's consumer with :func:`problem_with` in front of every task strategy."""

    def create_task_handler(self, *args: Any, **kwargs: Any) -> Callable[[Any], None]:
        handle: Callable[[Any], None] = super().create_task_handler(*args, **kwargs)
        settings = settings_of(self.app)
        keys = verification_keys(settings)
        replays = ReplayGuard(redis_client(settings), settings, held_here) if keys else None
        errors: tuple[type[BaseException], ...] = tuple(getattr(self, "connection_errors", ()))

        def on_task_received(message: Any) -> None:
            reason = problem_with(message, keys, replays)
            if reason is not None:
                refuse(message, reason, errors)
                return
            try:
                handle(message)
            except errors:
                raise
            except Exception as exc:
                if not message.acknowledged:
                    refuse(message, f"{type(exc).__name__}: {exc}", errors)
                else:
                    log.exception("task message %s failed in the consumer", message.headers)

        return on_task_received
