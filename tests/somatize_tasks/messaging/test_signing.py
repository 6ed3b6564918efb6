"""Signatures: what they bind, which keys verify them, and what they cost."""

from __future__ import annotations

import json

import pytest
from kombu.utils.json import dumps, loads
from pydantic import SecretStr, ValidationError

from somatize_tasks.config.settings import Settings
from somatize_tasks.messaging.signing import (
    HEADER,
    UNSIGNED,
    accepted_key_ids,
    check,
    key_id,
    refusing_workers,
    sign,
    signing_key,
    verification_keys,
)

KEY, OLD, OTHER = b"k" * 32, b"o" * 32, b"x" * 32
BODY = (
    (),
    {"run_id": "r1", "block": 2, "epoch": 0, "input": {"value": [1.5, "é", None]}},
    {
        "callbacks": None,
        "errbacks": [{"task": "somatize.run.transfer_failed", "args": ["r1", 2, 0, "t"]}],
        "chain": None,
    },
)


def _received(
    key: bytes, body: object = BODY, task: str = "somatize.node.run", task_id: str = "t-1"
) -> tuple[dict[str, str], object]:
    """The headers and decoded body a worker sees for a message signed with ``key``."""
    headers = {"task": task, "id": task_id, HEADER: sign(key, task, task_id, body)}
    return headers, loads(dumps(body))  # through the wire's JSON: tuples become lists


def test_a_signed_message_verifies_with_the_current_or_a_previous_key() -> None:
    headers, body = _received(KEY)
    assert check([KEY], headers, body) is None
    old_headers, old_body = _received(OLD)
    assert check([KEY, OLD], old_headers, old_body) is None
    assert "bad signature" in (check([KEY], old_headers, old_body) or "")


@pytest.mark.parametrize("change", ["input", "errback", "task", "id", "none"])
def test_every_part_of_a_message_is_bound(change: str) -> None:
    headers, body = _received(KEY)
    assert isinstance(body, list)
    if change == "input":
        body[1]["input"] = {"value": ["FORGED"]}
    elif change == "errback":
        body[2]["errbacks"][0]["args"][0] = "another-run"
    elif change == "task":
        headers["task"] = "somatize.run.transfer_failed"
    elif change == "id":
        headers["id"] = "t-2"
    expected = None if change == "none" else "bad signature (signed with another key, or altered)"
    assert check([KEY], headers, body) == expected


def test_unsigned_and_wrongly_signed_messages_say_why() -> None:
    headers, body = _received(OTHER)
    assert check([KEY], headers, body) == "bad signature (signed with another key, or altered)"
    del headers[HEADER]
    assert check([KEY], headers, body) == "unsigned (no somatize_signature header)"


def test_keys_come_from_settings_and_short_ones_are_refused_without_echoing_them() -> None:
    settings = Settings(message_key="n" * 16, message_keys_previous=f"{'a' * 16}, {'b' * 20}")
    assert signing_key(settings) == b"n" * 16
    assert verification_keys(settings) == [b"n" * 16, b"a" * 16, b"b" * 20]
    assert signing_key(Settings()) is None and verification_keys(Settings()) == []
    assert Settings(message_key="").message_key is None
    with pytest.raises(ValidationError) as caught:
        Settings(message_key="short-secret")
    assert "at least 16 characters" in str(caught.value)
    assert "short-secret" not in str(caught.value)
    assert "n" * 16 not in json.dumps(settings.redacted())
    assert settings.model_copy().message_key == SecretStr("n" * 16)


def test_a_key_mismatch_between_producer_and_workers_is_named_without_the_keys() -> None:
    workers = Settings(
        message_key=SecretStr(KEY.decode()), message_keys_previous=[SecretStr(OLD.decode())]
    )
    accepted = accepted_key_ids(workers)
    assert accepted == [key_id(KEY), key_id(OLD)]
    assert accepted_key_ids(Settings()) == [UNSIGNED]
    announced = {"w1": accepted, "w2": [UNSIGNED], "w3": None}
    for producer_key in (KEY, OLD):  # the current and a previous key both pass
        producer = Settings(message_key=SecretStr(producer_key.decode()))
        assert refusing_workers(producer, announced) is None
    problem = refusing_workers(Settings(message_key=SecretStr(OTHER.decode())), announced)
    assert problem is not None
    assert "w1" in problem and "w2" not in problem and "w3" not in problem
    assert key_id(OTHER) in problem and key_id(KEY) in problem
    assert all(k.decode() not in problem for k in (KEY, OLD, OTHER))
    unsigned = refusing_workers(Settings(), announced)
    assert unsigned is not None and "no SOMATIZE_MESSAGE_KEY" in unsigned
