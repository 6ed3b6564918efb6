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
import queue
import socket
import threading
from typing import IO

from somatize_tasks.config.clock import settings_now
from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import GrantRefusedError, PeerTransferError
from somatize_tasks.messaging.signing import signing_key, verification_keys
from somatize_tasks.store import ArtifactRef, ArtifactStore
from somatize_tasks.transfer.grants import mint, tag_holds
from somatize_tasks.transfer.peer_protocol import CHUNK, TRAILER, read_line, request_line

#: Chunks in flight between the receiving and the writing thread.
RING = 4


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
    grant = mint(key, ref, settings.grant_ttl_s, settings_now(settings))  # Redis' clock
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
    """Copy ``size`` bytes from ``stream`` to ``fh``, then check the trailer; raising
    leaves no file behind (``LocalDir.write``). The socket is read on this thread and
    the bytes hashed and written on another (:class:`_Sink`), so both run at once;
    memory stays :data:`RING` chunks."""
    sink = _Sink(fh)
    left = size
    try:
        while left:
            buffer = sink.free.get()
            got = stream.readinto(buffer[: min(CHUNK, left)])  # type: ignore[attr-defined]
            if not got:
                raise PeerTransferError(f"cut short after {size - left} of {size} bytes")
            sink.full.put((buffer, got))
            left -= got
    finally:
        digest = sink.close()
    trailer = stream.read(TRAILER)
    if len(trailer) != TRAILER:
        raise PeerTransferError("cut short before its digest")
    sent, tag = trailer[:32], trailer[32:]
    if sent != digest:
        raise PeerTransferError("digest mismatch: the bytes received are not the bytes sent")
    if not tag_holds(keys, grant, sent, tag):
        raise PeerTransferError("the holder's tag does not hold (not signed with our key)")


class _Sink:
    """A thread that hashes and writes the chunks the receiving thread fills, handing
    each buffer back once done (a ring of :data:`RING` buffers)."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh = fh
        self.free: queue.Queue[memoryview] = queue.Queue()
        self.full: queue.Queue[tuple[memoryview, int] | None] = queue.Queue()
        for _ in range(RING):
            self.free.put(memoryview(bytearray(CHUNK)))
        self.digest = hashlib.sha256()
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._drain, name="somatize-pull-sink", daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        while (item := self.full.get()) is not None:
            buffer, got = item
            if self.failure is None:
                try:
                    self.digest.update(buffer[:got])
                    self.fh.write(buffer[:got])
                except BaseException as exc:  # a full disk: raised by close()
                    self.failure = exc
            self.free.put(buffer)

    def close(self) -> bytes:
        """Wait for the last chunk; the SHA-256 of all (raises what writing raised)."""
        self.full.put(None)
        self.thread.join()
        if self.failure is not None:
            raise self.failure
        return self.digest.digest()
