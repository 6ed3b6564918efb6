"""Where workers serve their values to each other (direct transfers).

A worker announces, when it starts (and again after Redis lost its
records), one entry in ``<p>:workers:peers``: ``{"address": "host:port"}``
where its value server listens, or ``{"address": null}`` when it serves
nothing (``SOMATIZE_SERVE_VALUES=false``, no message key, ``transfer=s3``, a
``local`` store, where every value is shared through a directory anyway, or
its port could not be bound). An entry also says the worker can *pull*
(it knows ``somatize.transfer.pull``): a dispatcher sends a direct transfer
only to a target with an entry, from a holder with an address; a worker
from before direct transfers has none and gets the S3 chain as before. The
entry goes with the worker's other registry records (``forget.lua``).

The address is ``serve_address`` if set, else the bind address if it is a
specific one, else the address this host uses to reach Redis: the interface
the other workers, which reach the same Redis, most likely reach too.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from redis import Redis

from somatize_tasks.config.keys import RedisKeys
from somatize_tasks.config.settings import Settings

_ANY = ("", "0.0.0.0", "::")


@dataclass(frozen=True)
class Peer:
    """A worker's announcement: where it serves values (None: it serves none)."""

    address: str | None


def announce(client: Redis[bytes], keys: RedisKeys, worker_id: str, address: str | None) -> None:
    """Say where ``worker_id`` serves its values (None: nowhere; it still pulls)."""
    client.hset(keys.workers_peers, worker_id, json.dumps({"address": address}))


def read_peers(
    client: Redis[bytes], keys: RedisKeys, worker_ids: Iterable[str]
) -> dict[str, Peer | None]:
    """Each worker's announcement in one ``HMGET`` (None: it announced nothing)."""
    ids = sorted(set(worker_ids))
    if not ids:
        return {}
    return dict(zip(ids, map(_parse, client.hmget(keys.workers_peers, ids)), strict=True))


def _parse(raw: bytes | None) -> Peer | None:
    if raw is None:
        return None
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        address = json.loads(raw).get("address")
        return Peer(address if isinstance(address, str) and address else None)
    return Peer(None)


def serves(settings: Settings) -> str | None:
    """Why this worker serves no values (None: it does)."""
    if not settings.serve_values:
        return "SOMATIZE_SERVE_VALUES is false"
    if settings.store_kind != "s3":
        return "values are shared through a directory on this machine (SOMATIZE_STORE_KIND=local)"
    if settings.transfer == "s3":
        return "SOMATIZE_TRANSFER is s3"
    if settings.message_key is None:
        return "there is no SOMATIZE_MESSAGE_KEY to sign grants with"
    return None


def advertised_host(settings: Settings) -> str:
    """The host part of the address other workers connect to (see the docstring)."""
    if settings.serve_address:
        return settings.serve_address
    if settings.serve_bind not in _ANY:
        return settings.serve_bind
    parts = urlsplit(settings.redis_url)
    if parts.hostname and parts.scheme != "unix":
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with contextlib.suppress(OSError), probe:
            probe.connect((parts.hostname, parts.port or 6379))  # no packet is sent
            return str(probe.getsockname()[0])
    with contextlib.suppress(OSError):
        return socket.gethostbyname(socket.gethostname())
    return "127.0.0.1"


def peer_address(host: str, port: int) -> str:
    """``host:port``, with brackets around an IPv6 host."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
