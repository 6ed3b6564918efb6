"""Run, node and worker ids as storage key parts that can never escape their prefix.

An id with a path separator, a NUL or other control character, ``.`` or
``..``, or more than :data:`MAX_ID_LENGTH` characters is refused with an
error naming the field. Whatever is left is percent-encoded (keeping
letters, digits and ``-_.~``), so a key part is always one safe path
component, and distinct ids always map to distinct keys.
"""

from __future__ import annotations

import re
from urllib.parse import quote

from somatize_tasks.errors import ArtifactIdError

MAX_ID_LENGTH = 200
#: The run id the content cache's values are stored under (``__cache__/<hash>/0``): no run
#: is ever given it (run ids are hex), so its values outlive every run.
CACHE_RUN = "__cache__"
_SEPARATORS = ("/", "\\")
#: An id of only the characters ``quote`` keeps, within the length limit: valid as is.
_PLAIN = re.compile(rf"[A-Za-z0-9_.~-]{{1,{MAX_ID_LENGTH}}}").fullmatch


def key_part(field: str, value: object) -> str:
    """``value`` checked and encoded as one key component; ``field`` names it in errors."""
    if isinstance(value, str) and _PLAIN(value) and value not in (".", ".."):
        return value  # the common id: nothing to refuse, nothing to encode (~20x faster)
    if not isinstance(value, str) or not value:
        raise ArtifactIdError(f"{field} must be a non-empty string, not {value!r}")
    shown = value if len(value) <= 40 else value[:40] + "..."
    if len(value) > MAX_ID_LENGTH:
        raise ArtifactIdError(
            f"{field} {shown!r} is {len(value)} characters long; the limit is {MAX_ID_LENGTH}"
        )
    for separator in _SEPARATORS:
        if separator in value:
            raise ArtifactIdError(f"{field} {shown!r} contains {separator!r}; ids cannot be paths")
    if any(ord(char) < 32 or ord(char) == 127 for char in value):
        raise ArtifactIdError(f"{field} {shown!r} contains a NUL or control character")
    if value in (".", ".."):
        raise ArtifactIdError(f"{field} {value!r} is not a valid id")
    if not value.isascii() and not _encodes(value):
        raise ArtifactIdError(f"{field} {shown!r} is not valid Unicode (a lone surrogate)")
    return quote(value, safe="-_.~")


def _encodes(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def artifact_key(run_id: str, node_id: str, iteration: int, attempt: int = 0) -> str:
    """``<run>/<node>/<iteration>``: where a node output lives under any store prefix;
    ``<run>/<node>/<iteration>.<attempt>`` for a fenced execution's (each attempt at a
    node writes under a key of its own: a stale one can never overwrite the winner's)."""
    for name, number in (("iteration", iteration), ("attempt", attempt)):
        if isinstance(number, bool) or not isinstance(number, int) or number < 0:
            raise ArtifactIdError(f"{name} must be a whole number >= 0, not {number!r}")
    last = f"{iteration}.{attempt}" if attempt else str(iteration)
    return f"{key_part('run id', run_id)}/{key_part('node id', node_id)}/{last}"
