"""A worker's value server: what is in its cache (or RAM tier), to workers with a grant.

It runs in the worker's main process (started by the heartbeat bootstep,
:mod:`somatize_tasks.workers.heartbeat`), on ``serve_bind``:``serve_port``
(every interface and a free port by default), and its address is announced
in the registry (:mod:`somatize_tasks.workers.peers`). Each connection asks
for one value (:mod:`~somatize_tasks.transfer.peer_protocol`); the server
serves it only with a valid grant for exactly that value, from the file
that holds exactly the size the grant names. Paths come from
:func:`~somatize_tasks.store.ids.artifact_key`, which refuses any id that
could leave the cache (``..``, separators, control characters).

Bounded: at most :data:`MAX_SERVING` values go out at once (further
connections wait in the listen backlog, then time out: their readers fall
back to S3), each connection has ``peer_timeout_s`` per socket operation, and
a value goes out by ``sendfile`` (no copy through Python) while a second
thread hashes the same file from the page cache for the trailer.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from somatize_tasks.errors import ArtifactIdError, GrantRefusedError
from somatize_tasks.store import ArtifactStore
from somatize_tasks.store.ids import artifact_key
from somatize_tasks.transfer.grants import value_tag, verify
from somatize_tasks.transfer.peer_protocol import (
    CHUNK,
    read_line,
    reply_line,
    requested,
)

log = logging.getLogger(__name__)

#: Values served at once; the accept loop waits for a free slot beyond this.
MAX_SERVING = 16


def file_digest(fd: int, size: int, stop: threading.Event) -> bytes:
    """SHA-256 of the first ``size`` bytes of ``fd``, read with ``pread`` (the file
    position is left to ``sendfile``); stops early when ``stop`` is set."""
    digest = hashlib.sha256()
    offset = 0
    while offset < size and not stop.is_set():
        chunk = os.pread(fd, min(CHUNK, size - offset), offset)
        if not chunk:
            break
        digest.update(chunk)
        offset += len(chunk)
    return digest.digest()


def send_body(sock: socket.socket, fh: IO[bytes], size: int) -> bytes:
    """Send ``size`` bytes of ``fh`` (zero-copy) and return their SHA-256, hashed on
    another thread meanwhile. A module-level function so a test can stand in a
    faulty one (a corrupted byte on the wire)."""
    found: list[bytes] = []
    stop = threading.Event()
    hasher = threading.Thread(
        target=lambda: found.append(file_digest(fh.fileno(), size, stop)),
        name="somatize-serve-digest",
        daemon=True,
    )
    hasher.start()
    try:
        sent = sock.sendfile(fh, 0, size)
    except BaseException:
        stop.set()  # the reader went away: no trailer to hash for
        raise
    finally:
        hasher.join()
    if sent != size or not found:
        raise OSError(f"sent {sent} of {size} bytes")
    return found[0]


class _Handler(socketserver.StreamRequestHandler):
    server: ValueServer

    def handle(self) -> None:
        self.connection.settimeout(self.server.timeout_s)
        try:
            self.server.serve_one(self.connection, self.rfile, self.wfile)
        except OSError as exc:  # the reader went away or stalled: its own problem
            log.info("direct transfer to %s ended early: %s", self.client_address, exc)


class ValueServer(socketserver.ThreadingTCPServer):
    """Serves ``store``'s values to grant holders (see the module docstring)."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(
        self,
        store: ArtifactStore,
        keys: list[bytes],
        bind: tuple[str, int],
        timeout_s: float,
        sign_key: bytes | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.keys = keys
        #: A grant's expiry is judged on the clock readers mint it with (Redis').
        self.clock = clock
        self.sign_key = sign_key or (keys[0] if keys else b"")
        self.timeout_s = timeout_s
        self.served = 0
        self.refused = 0
        self._slots = threading.BoundedSemaphore(MAX_SERVING)
        self._thread: threading.Thread | None = None
        family = socket.AF_INET6 if ":" in bind[0] else socket.AF_INET
        self.address_family = family
        super().__init__(bind, _Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start(self) -> None:
        """Serve on a daemon thread until :meth:`stop`."""
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.5}, name="somatize-serve"
        )
        self._thread.daemon = True
        self._thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Wait for a free slot before starting the request's thread (bounded)."""
        self._slots.acquire()
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def serve_one(
        self, sock: socket.socket, rfile: io.BufferedIOBase, wfile: io.BufferedIOBase
    ) -> None:
        """Answer one request: the value and its trailer, or a refusal."""
        try:
            run_id, node_id, iteration, attempt, size, token = requested(
                read_line(rfile, "request")
            )
            grant = verify(self.keys, token, self.clock())
            if not grant.names(run_id, node_id, iteration, attempt, size):
                raise GrantRefusedError("the grant is for another value")
            key = artifact_key(run_id, node_id, iteration, attempt)
        except (GrantRefusedError, ArtifactIdError) as exc:
            self.refused += 1
            log.warning("refused a direct transfer to %s: %s", sock.getpeername(), exc)
            wfile.write(reply_line(False, error=str(exc), refused=True))
            return
        path = self.store.held_path(key, size)
        opened = _open(path) if path is not None else None
        if opened is None:
            wfile.write(reply_line(False, error=f"'{key}' ({size} bytes) is not held here"))
            return
        with opened as fh:
            wfile.write(reply_line(True, size=size))
            digest = send_body(sock, fh, size)
            sock.sendall(digest + value_tag(self.sign_key, token, digest))
        self.served += 1


def _open(path: Any) -> IO[bytes] | None:
    """The file, open; None when it went meanwhile (its run was forgotten)."""
    with contextlib.suppress(FileNotFoundError):
        return open(path, "rb")  # closed by the caller's with
    return None


def start_server(
    store: ArtifactStore,
    keys: list[bytes],
    bind: str,
    port: int,
    timeout_s: float,
    on_error: Callable[[OSError], None] | None = None,
    clock: Callable[[], float] = time.time,
) -> ValueServer | None:
    """A started :class:`ValueServer`, or None (``on_error`` told) when the port
    cannot be bound: the worker then runs without serving, its values go by S3.
    ``clock`` judges grants' expiry: Redis', as readers mint them (config.clock)."""
    try:
        server = ValueServer(store, keys, (bind, port), timeout_s, clock=clock)
    except OSError as exc:
        if on_error is not None:
            on_error(exc)
        return None
    server.start()
    return server
