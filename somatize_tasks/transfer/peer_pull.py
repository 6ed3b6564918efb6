"""Pulling a value straight from the worker that holds it, into this worker's cache.

The reader mints a grant for the value (it holds the message key), connects
to the holder's announced address, and streams the bytes into a temporary
file in its cache while hashing them; the file takes the value's name only
when the size, the SHA-256 and the holder's tag all hold, so a value cut
short, altered or sent by a process without the key never becomes visible.
Every failure is a :class:`~somatize_tasks.errors.PeerTransferError` naming
the holder and the cause, which an ``auto`` transfer answers by going
through S3 instead.
"""

from __future__ import annotations

import hashlib
import socket
from typing import IO

from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import GrantRefusedError, PeerTransferError
from somatize_tasks.messaging.signing import signing_key, verification_keys
from somatize_tasks.store import ArtifactRef, ArtifactStore
from somatize_tasks.transfer.grants import mint, tag_holds
from somatize_tasks.transfer.peer_protocol import CHUNK, TRAILER, read_line, request_line


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) as a pair; a PeerTransferError if malformed."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise PeerTransferError(f"malformed peer address {address!r}")
    return host.strip("[]"), int(port)


def pull_value(store: ArtifactStore, ref: ArtifactRef, address: str, settings: Settings) -> int:
    """Bring ``ref``'s value from the worker serving on ``address`` into ``store``'s
    cache; the bytes received."""
    key = signing_key(settings)
    if key is None:
        raise PeerTransferError("no SOMATIZE_MESSAGE_KEY here: cannot mint a grant")
    grant = mint(key, ref, settings.grant_ttl_s)
    holder = f"worker '{ref.worker_id}' at {address}"
    try:
        with socket.create_connection(
            split_address(address), timeout=settings.peer_timeout_s
        ) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(request_line(ref, grant))
            with sock.makefile("rb") as stream:
                _read_reply(stream, ref)
                keys = verification_keys(settings)
                return store.receive(ref, lambda fh: _receive(stream, fh, ref.size, grant, keys))
    except GrantRefusedError as exc:
        raise GrantRefusedError(f"{holder} refused the pull: {exc}") from None
    except PeerTransferError as exc:
        raise PeerTransferError(f"pulling from {holder}: {exc}") from None
    except OSError as exc:
        raise PeerTransferError(f"pulling from {holder}: {exc}") from None


def _read_reply(stream: IO[bytes], ref: ArtifactRef) -> None:
    reply = read_line(stream, "reply")
    if reply.get("ok") is not True:
        error = str(reply.get("error", "no reason given"))[:500]
        raise (GrantRefusedError if reply.get("refused") else PeerTransferError)(error)
    if reply.get("size") != ref.size:
        offered = reply.get("size")
        raise PeerTransferError(f"the holder offers {offered!r} bytes; the ref says {ref.size}")


def _receive(stream: IO[bytes], fh: IO[bytes], size: int, grant: str, keys: list[bytes]) -> None:
    """Copy ``size`` bytes from ``stream`` to ``fh`` through one chunk of memory, then
    check the trailer; raising leaves no file behind (``LocalDir.write``)."""
    digest = hashlib.sha256()
    buffer = memoryview(bytearray(CHUNK))
    left = size
    while left:
        got = stream.readinto(buffer[: min(CHUNK, left)])  # type: ignore[attr-defined]
        if not got:
            raise PeerTransferError(f"cut short after {size - left} of {size} bytes")
        digest.update(buffer[:got])
        fh.write(buffer[:got])
        left -= got
    trailer = stream.read(TRAILER)
    if len(trailer) != TRAILER:
        raise PeerTransferError("cut short before its digest")
    sent, tag = trailer[:32], trailer[32:]
    if sent != digest.digest():
        raise PeerTransferError("digest mismatch: the bytes received are not the bytes sent")
    if not tag_holds(keys, grant, sent, tag):
        raise PeerTransferError("the holder's tag does not hold (not signed with our key)")
