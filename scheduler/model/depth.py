"""How deep a JSON document may nest, checked without recursing.

Python's ``json`` module, pydantic and every ``to_wire``/``model_dump`` walk
nest one call per level, so a document nested a few thousand levels deep
would end in a ``RecursionError`` deep inside them. These checks run first,
on the raw text (:func:`check_text_depth`) or on an already parsed value
(:func:`check_value_depth`), with a loop and an explicit stack, and refuse
anything deeper than :data:`MAX_JSON_DEPTH` with a :class:`PlanValidationError`
naming the limit and where it was passed.

The limit is serde_json's own (Soma's reader stops at 128 levels too), so
nothing this project refuses would have loaded in Soma. A plan nests at most
``plan_checks.MAX_DEPTH`` variants; that rule is checked after loading.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from scheduler.errors import FieldProblem, PlanValidationError

#: Arrays and objects may nest at most this many levels (serde_json's limit).
MAX_JSON_DEPTH = 128

# A JSON string (an unterminated one runs to the end), or one bracket.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\Z)|[\[\]{}]', re.DOTALL)
_OPEN = frozenset("[{")
_CLOSE = frozenset("]}")
_CONTAINERS = (Mapping, list, tuple)
#: A container's place: (parent's trail, key), or None at the top.
_Trail = tuple[Any, Any] | None


def text_too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> int | None:
    """The offset in ``text`` of the first bracket nested deeper than ``limit``,
    or None. Brackets inside strings do not count; linear in the text."""
    depth = 0
    for match in _TOKEN.finditer(text):
        char = text[match.start()]
        if char in _OPEN:
            depth += 1
            if depth > limit:
                return match.start()
        elif char in _CLOSE:
            depth = max(0, depth - 1)
    return None


def decode_json_text(data: str | bytes | bytearray, what: str = "plan") -> str:
    """JSON text as ``str``: bytes are decoded as JSON allows (UTF-8, -16 or -32);
    bytes that are not text are a :class:`PlanValidationError`."""
    if isinstance(data, str):
        return data
    try:
        return bytes(data).decode(json.detect_encoding(data))
    except UnicodeDecodeError as exc:
        problem = f"not UTF-8 text (byte {exc.start}: {exc.reason})"
        raise PlanValidationError(what, [FieldProblem("", problem)]) from None


def line_and_column(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of ``offset`` in ``text``."""
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def check_text_depth(text: str, what: str = "plan", limit: int = MAX_JSON_DEPTH) -> None:
    """Raise :class:`PlanValidationError` when the JSON ``text`` nests deeper than ``limit``."""
    offset = text_too_deep(text, limit)
    if offset is None:
        return
    line, column = line_and_column(text, offset)
    raise PlanValidationError(
        what,
        [
            FieldProblem(
                "",
                f"JSON nests more than {limit} levels deep (at line {line}, column {column}); "
                f"the limit is {limit}, as in Soma's reader",
            )
        ],
    )


def value_too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> str | None:
    """The path of the first container nested deeper than ``limit`` in a parsed
    value (dicts, lists, tuples), or None. Plan variant objects are not entered:
    their own checks walk them without recursing. Linear in the value's size."""
    level = [value] if isinstance(value, _CONTAINERS) else []
    depth = 1
    while level:  # level by level: cheap, and no path kept until one is needed
        if depth > limit:
            return _locate(value, limit)
        level = [
            child
            for item in level
            for child in (item.values() if isinstance(item, Mapping) else item)
            if isinstance(child, _CONTAINERS)
        ]
        depth += 1
    return None


def _locate(value: Any, limit: int) -> str:
    """The path of the first container deeper than ``limit`` (known to exist)."""
    # Each entry keeps a link to its parent's trail; only the one found is spelled out.
    stack: list[tuple[Any, int, _Trail]] = [(value, 1, None)]
    while stack:
        item, depth, trail = stack.pop()
        if depth > limit:
            return _spell(trail)
        pairs: Any = item.items() if isinstance(item, Mapping) else enumerate(item)
        stack.extend(
            (child, depth + 1, (trail, key))
            for key, child in pairs
            if isinstance(child, _CONTAINERS)
        )
    return "(top level)"


def _spell(trail: _Trail) -> str:
    keys: list[Any] = []
    while trail is not None:
        trail, key = trail
        keys.append(key)
    parts = [f"[{k}]" if isinstance(k, int) else f".{k}" for k in reversed(keys)]
    return "".join(parts).lstrip(".") or "(top level)"


def check_value_depth(value: Any, what: str = "plan", limit: int = MAX_JSON_DEPTH) -> None:
    """Raise :class:`PlanValidationError` when a parsed value nests deeper than ``limit``."""
    path = value_too_deep(value, limit)
    if path is None:
        return
    shown = path if len(path) <= 120 else path[:60] + "..." + path[-40:]
    raise PlanValidationError(
        what,
        [
            FieldProblem(
                "",
                f"nests more than {limit} levels deep (at {shown}); the limit is {limit}, "
                "as in Soma's reader",
            )
        ],
    )
