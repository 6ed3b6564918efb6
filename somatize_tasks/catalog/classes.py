"""Catalog entries named by a class path (``class:mylab.filters.Scale@1``), imported
only from the module prefixes this process allows.

A Soma bundle names each node's class (``class_path``), not a catalog
entry. Its nodes' ops are ``class:<class_path>@<class_version>``; a catalog
meeting such a name imports the class, checks its ``class_version`` as
Soma's ``Graph.load`` does, and registers it under that name. What a
message names is never imported as such: the module must be under one of
the prefixes the operator allowed (``SOMATIZE_ALLOWED_MODULES=mylab,shared.filters``;
a prefix allows itself and its submodules), else the node fails with a
one-line :class:`ModuleNotAllowedError`. Nothing is imported while none is
allowed.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterable

from somatize_tasks.errors import CatalogError, ModuleNotAllowedError

CLASS_OP_PREFIX = "class:"


def class_op(class_path: str, version: int | None = None) -> str:
    """The op (catalog name) of a class: ``class:<path>`` and ``@<version>`` when checked."""
    return f"{CLASS_OP_PREFIX}{class_path}" + ("" if version is None else f"@{version}")


def parse_class_op(name: str) -> tuple[str, int | None] | None:
    """(class path, version or None) of a class op; None for any other catalog name."""
    if not name.startswith(CLASS_OP_PREFIX):
        return None
    path, _, version = name[len(CLASS_OP_PREFIX) :].partition("@")
    if not version:
        return path, None
    if not version.isdigit():
        raise CatalogError(f"op {name!r}: the class version after '@' must be a number")
    return path, int(version)


def module_allowed(module: str, allowed: Iterable[str]) -> bool:
    """Whether ``module`` is one of the ``allowed`` prefixes or under one."""
    prefixes = (p.strip().rstrip(".") for p in allowed)
    return any(p and (module == p or module.startswith(p + ".")) for p in prefixes)


def import_class(class_path: str, version: int | None, allowed: Iterable[str]) -> type:
    """The class at ``class_path`` (``module.Class``, as Soma's ``_import_class`` reads it),
    imported only if its module is allowed; ``version`` must match its ``class_version``."""
    module, _, name = class_path.rpartition(".")
    allowed = list(allowed)
    if not module or not name:
        raise CatalogError(f"class_path {class_path!r} is not 'module.Class'")
    if not module_allowed(module, allowed):
        shown = ",".join(allowed) or "(none)"
        raise ModuleNotAllowedError(
            f"class_path {class_path!r} is outside the allowed modules "
            f"(SOMATIZE_ALLOWED_MODULES={shown}); add its module's prefix there to run it"
        )
    try:
        found = getattr(importlib.import_module(module), name)
    except ImportError as exc:
        raise CatalogError(f"class_path {class_path!r}: cannot import {module}: {exc}") from None
    except AttributeError:
        raise CatalogError(f"class_path {class_path!r}: {module} has no {name}") from None
    if not inspect.isclass(found):
        raise CatalogError(f"class_path {class_path!r} names a {type(found).__name__}, not a class")
    current = getattr(found, "class_version", 1)
    if version is not None and version != current:
        raise CatalogError(
            f"class_version mismatch for {class_path}: the bundle has {version}, the code "
            f"has {current} (as Soma's Graph.load, refused: migrate the state first)"
        )
    return found
