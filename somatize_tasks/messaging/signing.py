"""Signed task messages: an HMAC-SHA256 in a message header, over what the task will do.

Anyone who can write to the broker could otherwise push a JSON message that
a worker believes (a forged node input, a forged ``transfer_failed``). With
``SOMATIZE_MESSAGE_KEY`` set, every task message this project publishes
carries ``somatize_signature``: ``HMAC-SHA256(key, task name, task id,
body)``, where the body is Celery's ``[args, kwargs, embed]`` (so links,
errbacks and chains are covered too) in a canonical JSON form both sides can
rebuild. The body itself stays plain JSON, so Flower still reads it.

Workers verify with the current key and any ``SOMATIZE_MESSAGE_KEYS_PREVIOUS``
(see :mod:`somatize_tasks.messaging.message_guard`). Rotating: add the new key as
``MESSAGE_KEY`` with the old one in ``MESSAGE_KEYS_PREVIOUS`` on every
worker, restart them, then switch producers; later drop the old key.

Version 2 (``somatize_signed``) also covers every header a worker acts on
(:data:`SIGNED_HEADERS`: time limits, retries, ETA and expiry, group, and the
message's own id and expiry in ``somatize_message``); a worker with keys
requires it, so a copy with a changed ``timelimit`` is refused like a forged
body. Headers outside that list are display only (``argsrepr``, ``origin``) or
ignored, like the broker's ``redelivered`` flag (node deaths are counted from
the run's records). The v1 header is still written for workers from before
version 2, which check only that.

A signature binds a message's content, not its delivery: a copy of a genuine
message replayed is still genuine. The message id and expiry under the v2
signature are what a worker refuses replays by
(:mod:`somatize_tasks.messaging.replay`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from kombu.utils.json import dumps as kombu_dumps
from kombu.utils.json import loads as kombu_loads

from scheduler.errors import listing
from somatize_tasks.config.settings import Settings

HEADER = "somatize_signature"
_SCHEME = "v1="
#: The version 2 signature: task, id, body and :data:`SIGNED_HEADERS`.
SIGNED = "somatize_signed"
_SCHEME2 = "v2="
#: The message's own id and expiry (unix seconds): ``{"id": ..., "exp": ...}``.
MESSAGE = "somatize_message"
#: Every header a worker acts on: inside the v2 signature.
SIGNED_HEADERS = (
    "eta",
    "expires",
    "group",
    "group_index",
    "retries",
    "timelimit",
    "root_id",
    "parent_id",
    "ignore_result",
    "replaced_task_nesting",
    MESSAGE,
)
#: What a worker announces when it accepts unsigned messages (it has no key).
UNSIGNED = "unsigned"


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
    text = json.dumps([task, task_id, body], sort_keys=True, separators=(",", ":"), default=str)
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
    """Why a received message must be refused, or None if its v1 signature holds
    (what a remote-control command without a guard carries; tasks use :func:`check2`).

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


def covered(headers: dict[str, Any]) -> dict[str, Any]:
    """The headers the v2 signature covers, as they are on the wire."""
    return {name: headers.get(name) for name in SIGNED_HEADERS}


def _digest2(key: bytes, task: str, task_id: str, body: Any, headers: dict[str, Any]) -> str:
    signed = canonical(task, task_id, [body, covered(headers)])
    return _SCHEME2 + hmac.new(key, signed, hashlib.sha256).hexdigest()


def sign2(key: bytes, task: str, task_id: str, body: Any, headers: dict[str, Any]) -> str:
    """The v2 header value: :func:`sign`'s content plus every header a worker acts on,
    each through the wire's JSON once (so the worker rebuilds the same bytes)."""
    wire = kombu_loads(kombu_dumps([body, covered(headers)]))
    return _digest2(key, task, task_id, wire[0], wire[1])


def check2(keys: list[bytes], headers: dict[str, Any], body: Any) -> str | None:
    """Why a received task message must be refused, or None if its v2 signature holds
    (task, id, body and :data:`SIGNED_HEADERS`) and it carries a message id and expiry."""
    given = headers.get(SIGNED)
    if not isinstance(given, str) or not given:
        if headers.get(HEADER):
            return (
                "signed by a producer from before signature version 2 (no somatize_signed "
                "header: its headers and replays are not covered); upgrade the producer"
            )
        return "unsigned (no somatize_signature header)"
    task, task_id = str(headers.get("task", "")), str(headers.get("id", ""))
    for key in keys:
        if hmac.compare_digest(given, _digest2(key, task, task_id, body, headers)):
            return None if message_guard_of(headers) else "signed but without a message id"
    return "bad signature (signed with another key, or a header or the body altered)"


def message_guard_of(headers: dict[str, Any]) -> tuple[str, float] | None:
    """The message's ``(id, expiry)`` from its :data:`MESSAGE` header, if well formed."""
    found = headers.get(MESSAGE)
    if not isinstance(found, dict):
        return None
    message_id, expiry = found.get("id"), found.get("exp")
    if not isinstance(message_id, str) or not 0 < len(message_id) <= 64:
        return None
    if isinstance(expiry, bool) or not isinstance(expiry, int | float):
        return None
    return message_id, float(expiry)


def key_id(key: bytes) -> str:
    """A short public name for a key: a workers/producer mismatch can be told apart
    in an error message without ever showing the key."""
    return hmac.new(key, b"somatize-tasks key id", hashlib.sha256).hexdigest()[:12]


def accepted_key_ids(settings: Settings) -> list[str]:
    """What a worker announces at start: the ids of every key it verifies with, or
    ``[UNSIGNED]`` when it runs messages without a signature."""
    return [key_id(key) for key in verification_keys(settings)] or [UNSIGNED]


def refusing_workers(settings: Settings, accepted: dict[str, list[str] | None]) -> str | None:
    """Why workers would refuse this producer's messages, or None.

    ``accepted``: each placed worker's announced key ids (None: not announced,
    e.g. a worker that predates announcements; not judged). A producer whose
    messages would be dropped gets this as an error at submit, instead of a run
    whose messages are refused one by one in the workers' logs.
    """
    key = signing_key(settings)
    mine = UNSIGNED if key is None else key_id(key)
    refusing = sorted(
        worker
        for worker, ids in accepted.items()
        if ids is not None and UNSIGNED not in ids and mine not in ids
    )
    if not refusing:
        return None
    wanted = sorted({i for w in refusing for i in accepted[w] or []})
    shown = listing(refusing, most=5)
    have = (
        "this producer has no SOMATIZE_MESSAGE_KEY"
        if key is None
        else f"this producer signs with key id {mine}"
    )
    return (
        f"worker(s) {shown} would refuse this run's messages: they accept only messages "
        f"signed with key id {listing(wanted, sep=' or ')}, and {have}. Set SOMATIZE_MESSAGE_KEY "
        "to the workers' key (key ids name keys without showing them)"
    )
