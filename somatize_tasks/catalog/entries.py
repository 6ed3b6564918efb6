"""The node catalog: the allowlist of what a worker may run, by name.

``@node("normalize")`` registers a callable (input as its single positional
argument, run parameters as keywords) or a Soma-style Filter class
(``fit(x, y=None) -> state``, ``forward(x, state) -> output``; the run's
parameters go to its constructor, and a fresh instance serves each task).
A Filter is trainable unless it says ``_kind = "stateless"`` (Soma's
spelling; ``kind`` works too). In a Stream, an entry keeps a stream mode:
``@node("scale", stream="evolving")``, or Soma's class attribute
``_stream_mode = "fixed" | "evolving" | "barrier"``; FixedState by default.
For the content cache (:mod:`somatize_tasks.cache`), ``deterministic=False``
(Soma's ``_deterministic = False``) says a node's forward must run every time,
and ``cache_version="2"`` (Soma's ``_cache_version``) names its code's version
instead of its source text.
A worker fills its catalog by importing the modules named by ``--nodes`` at
start (:func:`load_catalog_modules`); nothing in a message can add to it.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, overload

from scheduler.errors import listing
from somatize_tasks.catalog.classes import import_class, parse_class_op
from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import (
    CatalogError,
    DuplicateNodeError,
    NodeParamsError,
    UnknownNodeError,
)

T = TypeVar("T")
#: Soma's numbering of a repeated node: ``double_2`` is the second ``double``.
_SOMA_NUMBER = re.compile(r"^(?P<base>.+)_(?P<n>\d+)$")
EntryKind = Literal["function", "filter"]
StreamMode = Literal["fixed_state", "evolving", "barrier"]
_STREAM_MODES: dict[str, StreamMode] = {
    "fixed_state": "fixed_state",
    "fixed": "fixed_state",
    "FixedState": "fixed_state",
    "evolving": "evolving",
    "Evolving": "evolving",
    "barrier": "barrier",
    "Barrier": "barrier",
}
_FILTER_KINDS = {
    "trainable": True,
    "Trainable": True,
    "opaque": True,
    "Opaque": True,
    "stateless": False,
    "Stateless": False,
}


@dataclass(frozen=True)
class CatalogEntry:
    """One runnable node: its name, the registered object and how to call it."""

    name: str
    target: Any
    kind: EntryKind
    signature: inspect.Signature | None = field(compare=False, default=None)
    stream_mode: StreamMode = "fixed_state"
    trainable: bool = False
    #: False: its forward output is never served from the content cache (Soma's rule).
    deterministic: bool = True
    #: Names the code's version in cache keys, instead of a hash of its source.
    cache_version: str | None = None

    @property
    def can_fit_composite(self) -> bool:
        """Whether this filter can fit a whole Composite block (``composite_fit``)."""
        return self.kind == "filter" and callable(getattr(self.target, "composite_fit", None))

    @property
    def qualname(self) -> str:
        return f"{self.target.__module__}.{self.target.__qualname__}"


def _is_filter(target: Any) -> bool:
    return (
        inspect.isclass(target)
        and callable(getattr(target, "fit", None))
        and callable(getattr(target, "forward", None))
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
        #: Module prefixes a ``class:`` name may import from (catalog.classes); None:
        #: ``SOMATIZE_ALLOWED_MODULES`` read when first needed. A worker sets it at start.
        self.allowed_modules: tuple[str, ...] | None = None
        self._entries: dict[str, CatalogEntry] = {}
        self._lock = threading.Lock()

    def register(
        self,
        name: str,
        target: Any,
        *,
        stream: str | None = None,
        deterministic: bool | None = None,
        cache_version: str | None = None,
    ) -> CatalogEntry:
        """Add ``target`` under ``name``; the same object again is a no-op (re-import)."""
        if not name or not isinstance(name, str):
            raise CatalogError(f"a node name must be a non-empty string, not {name!r}")
        mode = _stream_mode(
            name, stream if stream is not None else getattr(target, "_stream_mode", "fixed_state")
        )
        steady = bool(
            getattr(target, "_deterministic", True) if deterministic is None else deterministic
        )
        version = _version(cache_version or getattr(target, "_cache_version", None))
        if _is_filter(target):
            trainable = _trainable(name, target)
            entry = CatalogEntry(
                name, target, "filter", _signature(target), mode, trainable, steady, version
            )
        elif callable(target) and not inspect.isclass(target):
            entry = CatalogEntry(
                name, target, "function", _signature(target), mode, False, steady, version
            )
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

    def resolve(self, name: str) -> CatalogEntry | None:
        """The entry for ``name``, importing a ``class:`` name's class when its module is
        allowed (:mod:`somatize_tasks.catalog.classes`); None when there is none."""
        entry = self._entries.get(name)
        if entry is not None:
            return entry
        spec = parse_class_op(name)
        if spec is None:
            return None
        return self.register(name, import_class(*spec, self._allowed()))

    def _allowed(self) -> tuple[str, ...]:
        if self.allowed_modules is None:
            self.allowed_modules = tuple(Settings.from_env().allowed_modules)
        return self.allowed_modules

    def names(self) -> list[str]:
        return sorted(self._entries)

    def name_of(self, target: Any) -> str | None:
        """The name ``target`` (a registered function or class) is registered under."""
        with self._lock:
            entries = list(self._entries.values())
        return next((e.name for e in entries if e.target is target), None)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)


default_catalog = Catalog()


def catalog_names(node_id: str, ops: Mapping[str, str]) -> list[str]:
    """Catalog names to try for plan node ``node_id``, best first.

    An explicit ``ops`` entry wins. Otherwise the node id itself, then
    Soma's numbering of repeated filters: ``double_2`` is the second
    ``double``, so it runs ``double`` unless the catalog has ``double_2``.
    """
    explicit = ops.get(node_id)
    if explicit is not None:
        return [explicit]
    match = _SOMA_NUMBER.match(node_id)
    return [node_id, match.group("base")] if match else [node_id]


@overload
def node(name: Callable[..., Any], /) -> Callable[..., Any]: ...
@overload
def node(
    name: str | None = None,
    /,
    *,
    catalog: Catalog | None = None,
    stream: str | None = None,
    deterministic: bool | None = None,
    cache_version: str | None = None,
) -> Callable[[T], T]: ...


def node(
    name: Any = None,
    /,
    *,
    catalog: Catalog | None = None,
    stream: str | None = None,
    deterministic: bool | None = None,
    cache_version: str | None = None,
) -> Any:
    """Register a node: ``@node``, ``@node()`` or ``@node("name", stream="barrier")``.

    Without a name the function's (or class's) ``__name__`` is used. The
    decorated object is returned unchanged, so it stays callable locally.
    ``deterministic=False``: never served from the content cache;
    ``cache_version``: the code's version in cache keys (else its source).
    """
    target_catalog = default_catalog if catalog is None else catalog
    if callable(name):
        target_catalog.register(name.__name__, name)
        return name

    def decorate(target: T) -> T:
        target_catalog.register(
            name or getattr(target, "__name__", ""),
            target,
            stream=stream,
            deterministic=deterministic,
            cache_version=cache_version,
        )
        return target

    return decorate


def _version(value: Any) -> str | None:
    return None if value is None else str(value)


def _stream_mode(name: str, mode: Any) -> StreamMode:
    found = _STREAM_MODES.get(mode) if isinstance(mode, str) else None
    if found is None:
        raise CatalogError(
            f"node '{name}': stream mode {mode!r} does not exist; "
            "use 'fixed_state', 'evolving' or 'barrier'"
        )
    return found


def _trainable(name: str, target: Any) -> bool:
    kind = getattr(target, "_kind", getattr(target, "kind", "trainable"))
    if kind not in _FILTER_KINDS:
        raise CatalogError(
            f"node '{name}': filter kind {kind!r} does not exist; use 'trainable' or 'stateless'"
        )
    return _FILTER_KINDS[kind]


class BoundNode:
    """A catalog entry with one node's parameters: what a task calls, fit or forward.

    A Filter is instantiated once per task with its parameters; a function
    takes them as keywords on every call.
    """

    def __init__(self, entry: CatalogEntry, params: Mapping[str, Any] | None = None) -> None:
        self.entry = entry
        self.params = dict(params or {})
        _check_params(entry, self.params)
        self.instance: Any = entry.target(**self.params) if entry.kind == "filter" else None

    @property
    def trainable(self) -> bool:
        return self.entry.trainable

    def fit(self, x: Any, y: Any = None) -> Any:
        """Learn the state (a trainable Filter's ``fit(x, y)``)."""
        return self.instance.fit(x, y)

    def forward(self, x: Any, state: Any = None) -> Any:
        if self.instance is None:
            return self.entry.target(x, **self.params)
        return self.instance.forward(x, state)


def _check_params(entry: CatalogEntry, params: Mapping[str, Any]) -> None:
    problem = params_problem(entry, params)
    if problem is not None:
        raise NodeParamsError(f"node '{entry.name}': {problem}")


def params_problem(entry: CatalogEntry, params: Mapping[str, Any]) -> str | None:
    """Why ``params`` cannot be passed to ``entry`` (naming the parameter and what
    the entry takes), or None when they fit (or the entry has no signature)."""
    if entry.signature is None:
        return None
    try:
        if entry.kind == "filter":
            entry.signature.bind(**params)
        else:
            entry.signature.bind(None, **params)
    except TypeError as exc:
        takes = [
            name
            for name, p in entry.signature.parameters.items()
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        if entry.kind == "function":
            takes = takes[1:]  # the first parameter is the node's input
        return (
            f"{entry.qualname} cannot take parameters [{listing(map(repr, params))}]: "
            f"{exc}; it takes: {listing(takes) or 'no parameters'}"
        )
    return None


def call_node(entry: CatalogEntry, value: Any, params: Mapping[str, Any] | None = None) -> Any:
    """Run one node on ``value`` as an unsupervised fit would: a function call, or
    a trainable Filter's ``fit(x)`` then ``forward`` (a stateless one only forwards)."""
    bound = BoundNode(entry, params)
    state = bound.fit(value) if bound.trainable else None
    return bound.forward(value, state)


def cwd_importable() -> None:
    """Put the current directory first on ``sys.path``, as ``python -m`` and ``celery``
    do: ``--nodes mylab.nodes`` finds ``./mylab`` in every command, however started."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)


def load_catalog_modules(modules: Iterable[str], catalog: Catalog | None = None) -> list[str]:
    """Import the catalog modules a worker was started with; returns the catalog's names.

    Called once at worker start, and by every command that takes ``--nodes``;
    modules are found from the current directory too (:func:`cwd_importable`).
    An import failure names the module, since a worker without its nodes
    would only fail later, node by node.
    """
    modules = list(modules)
    if modules:
        cwd_importable()
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:
            raise CatalogError(f"cannot load node module '{module}': {exc}") from exc
    return (default_catalog if catalog is None else catalog).names()
