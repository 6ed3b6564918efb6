"""What every command shares: reading JSON files and turning errors into messages.

A command line user should see what was wrong and how to fix it, never a
traceback: :func:`friendly_errors` turns the project's own errors, bad
files and unreachable services into one ``Error: ...`` line and exit 1.
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import click
from pydantic import ValidationError
from redis.exceptions import RedisError

from scheduler import SchedulerError
from scheduler.model.depth import MAX_JSON_DEPTH, line_and_column, text_too_deep
from somatize_tasks.catalog.entries import cwd_importable
from somatize_tasks.errors import SomatizeError

P = ParamSpec("P")
R = TypeVar("R")


def load_json_file(path: str | Path, what: str) -> Any:
    """Parsed JSON from ``path``; errors name the file, the line and the column.

    Nesting deeper than :data:`~scheduler.model.depth.MAX_JSON_DEPTH` is refused before
    parsing (Python's reader recurses once per level), as is text that is not UTF-8.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise click.ClickException(f"{what} file '{file}' does not exist") from None
    except UnicodeDecodeError as exc:
        raise click.ClickException(
            f"{what} file '{file}' is not UTF-8 text (byte {exc.start}: {exc.reason})"
        ) from None
    except OSError as exc:
        raise click.ClickException(f"cannot read {what} file '{file}': {exc.strerror}") from None
    offset = text_too_deep(text)
    if offset is not None:
        line, column = line_and_column(text, offset)
        raise click.ClickException(
            f"{what} file '{file}' nests JSON more than {MAX_JSON_DEPTH} levels deep "
            f"(at line {line}, column {column}); the limit is {MAX_JSON_DEPTH}"
        )
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.ClickException(
            f"{what} file '{file}' is not valid JSON: {exc.msg} "
            f"at line {exc.lineno}, column {exc.colno}"
        ) from None


def import_node_modules(modules: Iterable[str]) -> None:
    """Import catalog modules named on the command line (``--nodes a.b,c.d``), found as
    a worker finds them: from the current directory too (``cwd_importable``)."""
    modules = list(modules)
    if modules:
        cwd_importable()
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise click.ClickException(f"cannot import node module '{module}': {exc}") from None


def split_modules(values: Iterable[str]) -> list[str]:
    return [m.strip() for value in values for m in value.split(",") if m.strip()]


def friendly_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Report expected failures as ``Error: <message>`` (exit 1), without a traceback."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except (SchedulerError, SomatizeError) as exc:
            raise click.ClickException(str(exc)) from None
        except RedisError as exc:
            raise click.ClickException(
                f"Redis is not reachable ({exc}). Is it running, and is SOMATIZE_REDIS_URL right?"
            ) from None

    return wrapper


def settings_problems(exc: ValidationError, flags: dict[str, str] | None = None) -> str:
    """A settings validation error as one line naming what the user set: the
    command-line flag in ``flags`` (field -> ``--flag``), else the variable."""
    problems = []
    for error in exc.errors():
        names = [str(part) for part in error["loc"]]
        where = "SOMATIZE_" + "_".join(names).upper() if names else "settings"
        where = (flags or {}).get("_".join(names), where)
        problems.append(f"{where}: {str(error['msg']).removeprefix('Value error, ')}")
    return "; ".join(problems)


class FriendlyGroup(click.Group):
    """A command group where invalid settings (``SOMATIZE_*``) are one ``Error:`` line.

    Every command builds its :class:`~somatize_tasks.config.settings.Settings` from the
    environment; catching the validation error here covers them all at once.
    """

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ValidationError as exc:
            if exc.title != "Settings":
                raise
            raise click.ClickException(f"invalid settings: {settings_problems(exc)}") from None
