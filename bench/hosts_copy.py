"""A plain socket copy, the physical limit a value edge is measured against.

    python -m bench.hosts_copy recv PORT          # on the receiving host: serves forever
    python -m bench.hosts_copy send HOST PORT N   # on the sending host: prints seconds

The sender sends an 8-byte length and ``N`` bytes from memory; the receiver reads
them into one reused buffer and answers one byte once it has all of them; the
sender's clock runs from its connect to that byte. No disk, no hashing, no protocol.
"""

from __future__ import annotations

import socket
import struct
import sys
import time

CHUNK = 1 << 20


def receive(port: int) -> None:
    buffer = memoryview(bytearray(CHUNK))
    with socket.create_server(("0.0.0.0", port)) as server:
        while True:
            conn, _ = server.accept()
            with conn:
                header = conn.recv(8, socket.MSG_WAITALL)
                if len(header) != 8:
                    continue
                (left,) = struct.unpack("!Q", header)
                while left:
                    got = conn.recv_into(buffer[: min(CHUNK, left)])
                    if not got:
                        break
                    left -= got
                conn.sendall(b"k")


def send(host: str, port: int, size: int) -> float:
    payload = bytes(size)
    began = time.perf_counter()
    with socket.create_connection((host, port), timeout=60) as conn:
        conn.sendall(struct.pack("!Q", size))
        conn.sendall(payload)
        if conn.recv(1) != b"k":
            raise RuntimeError("the receiver did not confirm")
    return time.perf_counter() - began


if __name__ == "__main__":
    if sys.argv[1] == "recv":
        receive(int(sys.argv[2]))
    else:
        print(f"{send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])):.6f}")
