"""A node's identity in cache keys: what it is, how it is configured, which code it runs.

As Soma's Python filters (``_identity.py``): the **qualified name** of the
class or function (two ``Model`` classes in different modules never meet),
its **canonical config** (the run's parameters merged over the signature's
defaults, as sorted-key JSON: ``lr=0.1`` given and ``lr=0.1`` by default are
the same configuration) and a **code fingerprint**: ``cache_version`` (or
``_cache_version``) when the node names one, else a hash of its source text.
Editing the node's code changes its keys; editing a helper it calls does not
(declare that with ``cache_version``).

"Uncacheable" is always explicit: a node whose source cannot be read and
that names no version, or whose defaults are not JSON, gets no identity (it
runs every time, with one warning), never a key that could collide.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import logging
import textwrap
from collections.abc import Mapping
from typing import Any

from somatize_tasks.cache.hashing import Digest, combine
from somatize_tasks.catalog.entries import CatalogEntry

log = logging.getLogger(__name__)
_warned: set[str] = set()


def node_identity(entry: CatalogEntry, params: Mapping[str, Any]) -> Digest | None:
    """The config hash of ``entry`` run with ``params``, or None if it has none."""
    code = code_fingerprint(entry.target, entry.cache_version)
    config = canonical_config(entry, params)
    if code is None or config is None:
        _warn_once(entry, "its source cannot be read" if code is None else "a default is not JSON")
        return None
    return combine("node", entry.qualname, config, code)


def canonical_config(entry: CatalogEntry, params: Mapping[str, Any]) -> str | None:
    """Sorted-key JSON of the parameters over the signature's defaults; None if not JSON."""
    config: dict[str, Any] = {}
    if entry.signature is not None:
        parameters = list(entry.signature.parameters.values())
        if entry.kind == "function":
            parameters = parameters[1:]  # the node's input
        for parameter in parameters:
            if parameter.default is not inspect.Parameter.empty:
                config[parameter.name] = parameter.default
    config.update(params)
    try:
        return json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=True)
    except (TypeError, ValueError):
        return None


@functools.cache
def _source_hash(target: Any) -> str | None:
    try:
        source = textwrap.dedent(inspect.getsource(target))
    except (OSError, TypeError):
        return None
    return hashlib.sha256(source.encode()).hexdigest()


def code_fingerprint(target: Any, version: str | None) -> str | None:
    """``version:<v>`` when the node names its version, else ``source:<sha256>``."""
    if version is not None:
        return f"version:{version}"
    found = _source_hash(target)
    return None if found is None else f"source:{found}"


def _warn_once(entry: CatalogEntry, why: str) -> None:
    if entry.qualname not in _warned:
        _warned.add(entry.qualname)
        log.warning(
            "node '%s' (%s) is not cached: %s; give it a cache_version to cache it",
            entry.name,
            entry.qualname,
            why,
        )
