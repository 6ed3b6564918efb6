"""Turning pydantic's validation errors into readable, path-named problems.

Pydantic reports a tagged-union member twice in its location (once as the
union tag, once as the wire key), and numbers list items bare. A person
reading an error wants the JSON path as it appears in their file:
``Sequence[2].Parallel[0].Remote.target.Tag``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from scheduler.errors import FieldProblem


def format_path(loc: Iterable[int | str], tags: Iterable[str] = ()) -> str:
    """``('Sequence', 'Sequence', 0, 'node_id')`` -> ``Sequence[0].node_id``."""
    tag_set = set(tags)
    parts: list[str] = []
    previous: int | str | None = None
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif not (item == previous and item in tag_set):
            parts.append(f".{item}" if parts else item)
        previous = item
    return "".join(parts)


def _message(error: ErrorDetails, tags: Iterable[str]) -> str:
    if error["type"] == "unknown_variant":
        return (
            f"{_describe_input(error['input'])} is not a plan variant; "
            f"expected one of {', '.join(tags)}"
        )
    if error["type"] == "missing":
        return "field required"
    if error["type"] == "extra_forbidden":
        return "unknown field"
    return str(error["msg"]).removeprefix("Value error, ")


def _describe_input(value: Any) -> str:
    if isinstance(value, dict):
        keys = ", ".join(repr(k) for k in list(value)[:5])
        return f"an object with keys {keys}" if value else "an empty object"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def problems_from_pydantic(exc: ValidationError, tags: Iterable[str] = ()) -> list[FieldProblem]:
    """One :class:`FieldProblem` per pydantic error, with a readable path."""
    tag_list = list(tags)
    return [
        FieldProblem(format_path(err["loc"], tag_list), _message(err, tag_list))
        for err in exc.errors(include_url=False)
    ]
