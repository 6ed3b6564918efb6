"""Loaded with ``--nodes`` into a worker whose value server must lie: it flips one
byte of every value it sends (the trailer still carries the file's true digest), as
a faulty NIC, a bad cable or a meddling middlebox would. Registers no nodes.

Patched in the worker's main process, where the server runs: catalog modules are
imported there before its bootsteps start (``workers.boot``).
"""

from __future__ import annotations

import socket
import threading
from typing import IO

from somatize_tasks.transfer import peer_server


def _flip_one_byte(sock: socket.socket, fh: IO[bytes], size: int) -> bytes:
    digest = peer_server.file_digest(fh.fileno(), size, threading.Event())
    sent = 0
    while sent < size:
        chunk = bytearray(fh.read(min(1 << 20, size - sent)))
        if sent == 0 and chunk:
            chunk[len(chunk) // 2] ^= 0xFF
        sock.sendall(chunk)
        sent += len(chunk)
    return digest


peer_server.send_body = _flip_one_byte
