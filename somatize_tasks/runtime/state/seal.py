"""Run state a Redis writer without the key cannot forge: a MAC on every deciding value.

With ``SOMATIZE_MESSAGE_KEY`` set, every value expression of a run's state that
decides a result carries ``"mac"``: HMAC-SHA256, under a key derived from the
message key, over the run id, where the value sits (``latest:<node>``,
``j:<block>:<pass>:<slot>``, ``i:<block>:<pass>``, ``state:<node>``, ``output``,
``intent:<block>:<pass>``) and the expression's JSON; one MAC per key the
writer knows (current and previous), so a producer still on the previous key
during a rotation reads what workers on the new one wrote. The refs inside an
expression carry each value's attempt (fencing), its inline bytes, and its store
key, so the MAC covers the recorded winner too. Every reader opens a value
through :meth:`Seal.open`: one without a valid MAC raises
:class:`~somatize_tasks.errors.RunStateTamperedError`, so a Redis writer without
the key can make a run fail, never make it return a value of its choosing, nor
move a value from one node, pass or run to another.

Not covered (a Redis writer can change them; what they decide is said here): node
statuses and attempt counters (fence out a live execution: the run waits for the
reaper or fails), the run's status and error (end it), the program fields of the
run's meta (plan, params, input, distribution: a run computes with what they say;
keep producers' writes on a Redis only they can write, or an ACL user per role),
loop signals and the counters of joins and transfers (stall or end a run).
Without a key nothing is sealed and nothing is checked.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from somatize_tasks.errors import RunStateTamperedError

MAC = "mac"


def state_keys(message_keys: list[bytes]) -> list[bytes]:
    """The run-state MAC keys, derived from the message keys (current first): a key
    used for one purpose only."""
    return [
        hmac.new(key, b"somatize run state v1", hashlib.sha256).digest() for key in message_keys
    ]


#: One encoder for every compact text: ``json.dumps`` with ``separators`` builds a new
#: encoder per call, a fifth of the cost of a wide fan-out's records.
_COMPACT = json.JSONEncoder(separators=(",", ":"))


def compact(value: Any) -> str:
    """JSON without spaces: what every field of a run's state holds."""
    return _COMPACT.encode(value)


class Seal:
    """Seals and opens one run's value expressions."""

    def __init__(self, keys: list[bytes], run_id: str) -> None:
        self.keys = keys
        self.run_id = run_id

    def _mac(self, key: bytes, where: str, text: str) -> str:
        signed = f"{self.run_id}|{where}|{text}".encode()
        return hmac.new(key, signed, hashlib.sha256).hexdigest()[:32]

    def close(self, where: str, expr: dict[str, Any]) -> str:
        """The stored text of ``expr`` at ``where``: its JSON with its MAC added."""
        return self.close_text(where, compact(expr))

    def close_text(self, where: str, text: str) -> str:
        """:meth:`close` of an expression already in its compact JSON (``text``)."""
        if not self.keys or not text.endswith("}"):
            return text
        joint = "," if len(text) > 2 else ""
        macs = ".".join(self._mac(key, where, text) for key in self.keys)
        return f'{text[:-1]}{joint}"{MAC}":"{macs}"}}'

    def open(self, where: str, raw: bytes | str) -> dict[str, Any]:
        """The expression stored at ``where``, its MAC checked (and dropped)."""
        found = dict(json.loads(raw))
        given = found.pop(MAC, None)
        if not self.keys:
            return found
        text = compact(found)
        if isinstance(given, str) and any(
            hmac.compare_digest(mac, self._mac(key, where, text))
            for mac in given.split(".")
            for key in self.keys
        ):
            return found
        raise RunStateTamperedError(
            f"run {self.run_id}: the value at '{where}' in its Redis state "
            f"{'has no MAC' if given is None else 'fails its MAC'}: it was not written by a "
            "process with the message key (a forged or moved value); it is refused"
        )
