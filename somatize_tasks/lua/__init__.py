"""The package's Redis Lua scripts, one ``.lua`` file each, loaded here only.

A script is one atomic step: a check and the write it guards run in Redis
with no other client in between (a result recorded once, a join counted
once, a lease released only by its holder). Each file's opening ``--``
comments document its KEYS, ARGV and reply. A line ``-- include: <name>``
is replaced by ``<name>.lua``, a fragment of local functions shared by
several scripts, so no script is written twice; a fragment is never
registered alone.
"""

from __future__ import annotations

import functools
import re
import weakref
from importlib import resources

from redis import Redis
from redis.commands.core import Script

_INCLUDE = re.compile(r"^--\s*include:\s*(\w+)\s*$", re.MULTILINE)
_registered: weakref.WeakKeyDictionary[Redis[bytes], dict[str, Script]] = (
    weakref.WeakKeyDictionary()
)


def _raw(name: str) -> str:
    return resources.files(__name__).joinpath(f"{name}.lua").read_text(encoding="utf-8")


@functools.cache
def source(name: str) -> str:
    """The text of ``<name>.lua`` as Redis runs it, its includes expanded."""
    return _expand(name, ())


def _expand(name: str, within: tuple[str, ...]) -> str:
    if name in within:
        raise ValueError(f"Lua include circle: {' -> '.join((*within, name))}")
    return _INCLUDE.sub(lambda m: _expand(m.group(1), (*within, name)), _raw(name))


@functools.cache
def names() -> tuple[str, ...]:
    """Every script's name (fragments, the files some script includes, left out)."""
    found = sorted(
        entry.name.removesuffix(".lua")
        for entry in resources.files(__name__).iterdir()
        if entry.name.endswith(".lua")
    )
    included = {m.group(1) for name in found for m in _INCLUDE.finditer(_raw(name))}
    return tuple(name for name in found if name not in included)


def registered(client: Redis[bytes]) -> dict[str, Script]:
    """Every script registered on ``client``, by name, once per client: a run's state
    is built per task, and hashing its scripts each time cost ~60 us a block."""
    found = _registered.get(client)
    if found is None:
        found = _registered[client] = {
            name: client.register_script(source(name)) for name in names()
        }
    return found


def script(client: Redis[bytes], name: str) -> Script:
    """The script ``<name>.lua`` registered on ``client`` (see :func:`registered`)."""
    return registered(client)[name]
