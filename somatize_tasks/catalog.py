"""The node catalog: the allowlist of what a worker may run, by name.

``@node("normalize")`` registers a callable (input as its single positional
argument, run parameters as keywords) or a Soma-style Filter class
(``fit(x, y=None) -> state``, ``forward(x, state) -> output``; the run's
parameters go to its constructor, and a fresh instance serves each call).
A worker fills its catalog by importing the modules named by ``--nodes`` at
start (:func:`load_catalog_modules`); nothing in a message can add to it.
"""

from __future__ import annotations

import importlib
import inspect
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, overload

from somatize_tasks.errors import (
    CatalogError,
    DuplicateNodeError,
    NodeParamsError,
    UnknownNodeError,
)

T = TypeVar("T")
EntryKind = Literal["function", "filter"]


@dataclass(frozen=True)
class CatalogEntry:
    """One runnable node: its name, the registered object and how to call it."""

    name: str
    target: Any
    kind: EntryKind
    signature: inspect.Signature | None = field(compare=False, default=None)

    @property
    def qualname(self) -> str:
        return f"{self.target.__module__}.{self.target.__qualname__}"


def _is_filter(target: Any) -> bool:
    return inspect.isclass(target) and callable(getattr(target, "fit", None)) and callable(
        getattr(target, "forward", None)
    )


def _signature(target: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(target)
    except (TypeError, ValueError):  # some builtins have none; call them unchecked
        return None


class Catalog:
    """Named node entries; thread-safe to read, written at import time."""

    def __init__(self, worker_id: str | None = None) -> None:
        self.worker_id = worker_id
        self._entries: dict[str, CatalogEntry] = {}
        self._lock = threading.Lock()

    def register(self, name: str, target: Any) -> CatalogEntry:
        """Add ``target`` under ``name``; the same object again is a no-op (re-import)."""
        if not name or not isinstance(name, str):
            raise CatalogError(f"a node name must be a non-empty string, not {name!r}")
        if _is_filter(target):
            entry = CatalogEntry(name, target, "filter", _signature(target))
        elif callable(target) and not inspect.isclass(target):
            entry = CatalogEntry(name, target, "function", _signature(target))
        else:
            raise CatalogError(
                f"node '{name}': {target!r} is neither a callable nor a Filter class "
                "with fit(x, y=None) and forward(x, state)"
            )
        with self._lock:
            existing = self._entries.get(name)
            if existing is not None and existing.qualname != entry.qualname:
                raise DuplicateNodeError(
                    f"node '{name}' is already registered to {existing.qualname}; "
                    f"cannot register {entry.qualname} under the same name"
                )
            self._entries[name] = entry
        return entry

    def get(self, name: str, *, worker_id: str | None = None) -> CatalogEntry:
        """The entry for ``name``, or :class:`UnknownNodeError` naming what is here."""
        entry = self._entries.get(name)
        if entry is None:
            raise UnknownNodeError.for_node(name, worker_id or self.worker_id, self.names())
        return entry

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)


default_catalog = Catalog()


@overload
def node(name: Callable[..., Any], /) -> Callable[..., Any]: ...
@overload
def node(name: str | None = None, /, *, catalog: Catalog | None = None) -> Callable[[T], T]: ...


def node(name: Any = None, /, *, catalog: Catalog | None = None) -> Any:
    """Register a node: ``@node``, ``@node()`` or ``@node("name")``.

    Without a name the function's (or class's) ``__name__`` is used. The
    decorated object is returned unchanged, so it stays callable locally.
    """
    target_catalog = default_catalog if catalog is None else catalog
    if callable(name):
        target_catalog.register(name.__name__, name)
        return name

    def decorate(target: T) -> T:
        target_catalog.register(name or getattr(target, "__name__", ""), target)
        return target

    return decorate


def _check_params(entry: CatalogEntry, value: Any, params: Mapping[str, Any]) -> None:
    if entry.signature is None:
        return
    try:
        if entry.kind == "filter":
            entry.signature.bind(**params)
        else:
            entry.signature.bind(value, **params)
    except TypeError as exc:
        raise NodeParamsError(
            f"node '{entry.name}' ({entry.qualname}) cannot take parameters "
            f"{sorted(params)}: {exc}"
        ) from None


def call_node(entry: CatalogEntry, value: Any, params: Mapping[str, Any] | None = None) -> Any:
    """Run one node on ``value``: a function call, or Filter ``fit`` then ``forward``."""
    kwargs = dict(params or {})
    _check_params(entry, value, kwargs)
    if entry.kind == "filter":
        instance = entry.target(**kwargs)
        state = instance.fit(value)
        return instance.forward(value, state)
    return entry.target(value, **kwargs)


def load_catalog_modules(modules: Iterable[str], catalog: Catalog | None = None) -> list[str]:
    """Import the catalog modules a worker was started with; returns the catalog's names.

    Called once at worker start. An import failure names the module, since
    a worker without its nodes would only fail later, node by node.
    """
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:
            raise CatalogError(f"cannot load node module '{module}': {exc}") from exc
    return (default_catalog if catalog is None else catalog).names()
