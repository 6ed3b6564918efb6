"""Grants: a short-lived permission, signed with the message key, to pull one value.

A worker serves a value only to a request that carries a grant for exactly
that value (run, node, iteration, attempt and size) which has not expired
and whose MAC holds under one of the server's verification keys (the
current ``SOMATIZE_MESSAGE_KEY`` or a previous one, so a key rotation does
not stop transfers). Only processes that hold the key can mint one, so a peer
on the network without it reads nothing. The reader mints its grant right
before it pulls (it holds the key as every worker does), with a lifetime of
``grant_ttl_s``: a grant seen on the wire is worth that long, for that value.

Each MAC is domain-separated (``somatize-grant-v1``, ``somatize-value-v1``)
so no grant can pass for a task message signature or the other way round.
The server ends every value with a tag: the MAC of the grant and the SHA-256
of the bytes it sent, so a reader knows the bytes came from a key holder,
whole and unchanged.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from typing import Any

from somatize_tasks.errors import GrantRefusedError
from somatize_tasks.store.ref import ArtifactRef

_GRANT = b"somatize-grant-v1\n"
_VALUE = b"somatize-value-v1\n"
#: A grant is refused past this many characters (a request line stays small).
MAX_GRANT_CHARS = 2048


@dataclass(frozen=True)
class Grant:
    """What a grant allows: one value, until ``expires`` (unix seconds)."""

    run_id: str
    node_id: str
    iteration: int
    attempt: int
    size: int
    expires: float

    def names(self, run_id: str, node_id: str, iteration: int, attempt: int, size: int) -> bool:
        """Whether this grant is for exactly that value."""
        return (self.run_id, self.node_id, self.iteration, self.attempt, self.size) == (
            run_id,
            node_id,
            iteration,
            attempt,
            size,
        )


def _mac(key: bytes, domain: bytes, data: bytes) -> str:
    return hmac.new(key, domain + data, hashlib.sha256).hexdigest()


def mint(key: bytes, ref: ArtifactRef, ttl_s: float, now: float | None = None) -> str:
    """A grant to pull ``ref``'s value for ``ttl_s`` seconds: ``<payload>.<mac>``."""
    expires = (time.time() if now is None else now) + ttl_s
    payload = json.dumps(
        [ref.run_id, ref.node_id, ref.iteration, ref.attempt, ref.size, round(expires, 3)],
        separators=(",", ":"),
    ).encode()
    body = base64.urlsafe_b64encode(payload).rstrip(b"=")
    return f"{body.decode()}.{_mac(key, _GRANT, body)}"


def verify(keys: list[bytes], token: Any, now: float | None = None) -> Grant:
    """The grant ``token`` holds, or :class:`GrantRefusedError` saying why not."""
    if not keys:
        raise GrantRefusedError("this worker has no message key: it serves no values")
    if not isinstance(token, str) or not token:
        raise GrantRefusedError("no grant")
    if len(token) > MAX_GRANT_CHARS or token.count(".") != 1:
        raise GrantRefusedError("malformed grant")
    body, _, mac = token.partition(".")
    if not any(hmac.compare_digest(mac, _mac(key, _GRANT, body.encode())) for key in keys):
        raise GrantRefusedError("bad grant (signed with another key, or altered)")
    grant = _decode(body)
    if grant.expires <= (time.time() if now is None else now):
        raise GrantRefusedError("expired grant")
    return grant


def _decode(body: str) -> Grant:
    try:
        fields = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        run_id, node_id, iteration, attempt, size, expires = fields
        numbers = (iteration, attempt, size)
        if not (isinstance(run_id, str) and isinstance(node_id, str)) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in numbers
        ):
            raise ValueError("wrong field types")
        return Grant(run_id, node_id, iteration, attempt, size, float(expires))
    except (ValueError, TypeError, binascii.Error) as exc:
        raise GrantRefusedError(f"malformed grant ({exc})") from None


def value_tag(key: bytes, token: str, digest: bytes) -> bytes:
    """The tag a server sends after a value: MAC of the grant and the bytes' SHA-256."""
    return hmac.new(key, _VALUE + token.encode() + b"\n" + digest, hashlib.sha256).digest()


def tag_holds(keys: list[bytes], token: str, digest: bytes, tag: bytes) -> bool:
    """Whether ``tag`` is a key holder's for this grant and these bytes."""
    return any(hmac.compare_digest(tag, value_tag(key, token, digest)) for key in keys)
