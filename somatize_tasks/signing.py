"""Signed task messages: an HMAC-SHA256 in a message header, over what the task will do.

Anyone who can write to the broker could otherwise push a JSON message that
a worker believes (a forged node input, a forged ``transfer_failed``). With
``SOMATIZE_MESSAGE_KEY`` set, every task message this project publishes
carries ``somatize_signature``: ``HMAC-SHA256(key, task name, task id,
body)``, where the body is Celery's ``[args, kwargs, embed]`` (so links,
errbacks and chains are covered too) in a canonical JSON form both sides can
rebuild. The body itself stays plain JSON, so Flower still reads it.

Workers verify with the current key and any ``SOMATIZE_MESSAGE_KEYS_PREVIOUS``
(see :mod:`somatize_tasks.message_guard`). Rotating: add the new key as
``MESSAGE_KEY`` with the old one in ``MESSAGE_KEYS_PREVIOUS`` on every
worker, restart them, then switch producers; later drop the old key.

A signature binds a message's content, not its delivery: a copy of a
genuine message replayed is still genuine, and ``mark_running``'s task-id
check is what keeps a replay from running a block twice.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from kombu.utils.json import dumps as kombu_dumps
from kombu.utils.json import loads as kombu_loads

from somatize_tasks.settings import Settings

HEADER = "somatize_signature"
_SCHEME = "v1="


def signing_key(settings: Settings) -> bytes | None:
    """The key this process signs with, or None when messages go unsigned."""
    if settings.message_key is None:
        return None
    return settings.message_key.get_secret_value().encode()


def verification_keys(settings: Settings) -> list[bytes]:
    """Every key a signature may have been made with: the current one first."""
    keys = [] if settings.message_key is None else [settings.message_key]
    keys += settings.message_keys_previous
    return [key.get_secret_value().encode() for key in keys]


def canonical(task: str, task_id: str, body: Any) -> bytes:
    """What is signed: the task, its id and the decoded body, as sorted compact JSON."""
    text = json.dumps(
        [task, task_id, body], sort_keys=True, separators=(",", ":"), default=str
    )
    return text.encode()


def _digest(key: bytes, task: str, task_id: str, body: Any) -> str:
    return _SCHEME + hmac.new(key, canonical(task, task_id, body), hashlib.sha256).hexdigest()


def sign(key: bytes, task: str, task_id: str, body: Any) -> str:
    """The header value for a message about to be published.

    ``body`` is the Python value Celery will serialise; it goes through the
    wire's JSON once here, so the worker, which only sees the decoded wire
    form (lists for tuples, string keys), rebuilds exactly the same bytes.
    """
    return _digest(key, task, task_id, kombu_loads(kombu_dumps(body)))


def check(keys: list[bytes], headers: dict[str, Any], body: Any) -> str | None:
    """Why a received message must be refused, or None if its signature holds.

    ``body`` is the decoded body as the worker received it.
    """
    given = headers.get(HEADER)
    if not isinstance(given, str) or not given:
        return "unsigned (no somatize_signature header)"
    task, task_id = str(headers.get("task", "")), str(headers.get("id", ""))
    for key in keys:
        if hmac.compare_digest(given, _digest(key, task, task_id, body)):
            return None
    return "bad signature (signed with another key, or altered)"
