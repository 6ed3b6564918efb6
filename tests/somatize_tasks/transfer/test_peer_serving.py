"""A worker's value server and the pull that reads from it, in one process.

The holder's store and the reader's store have caches of their own (two
workers on two machines); the server listens on loopback. Every refusal the
protocol promises is tried with a hand-made request: no grant, a grant made
with another key, an expired one, one for another value, ids that try to
leave the cache; and a value whose bytes change on the wire is never kept.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import numpy as np
import pytest
from pydantic import SecretStr

from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import GrantRefusedError, PeerTransferError
from somatize_tasks.store import ArtifactRef, ArtifactStore
from somatize_tasks.transfer import peer_server
from somatize_tasks.transfer.grants import mint, verify
from somatize_tasks.transfer.peer_protocol import request_line
from somatize_tasks.transfer.peer_pull import pull_value
from somatize_tasks.transfer.peer_server import ValueServer, file_digest

KEY = "k" * 32
OTHER_KEY = "o" * 32


@pytest.fixture
def keyed(tmp_path: Path) -> Settings:
    return Settings(
        store_kind="s3",
        s3_bucket="unused",
        cache_dir=tmp_path / "cache",
        inline_max_bytes=1024,
        message_key=SecretStr(KEY),
        peer_timeout_s=5.0,
    )


@pytest.fixture
def holder(keyed: Settings) -> ArtifactStore:
    return ArtifactStore(keyed, "holder")


@pytest.fixture
def server(holder: ArtifactStore) -> Iterator[ValueServer]:
    serving = ValueServer(holder, [KEY.encode()], ("127.0.0.1", 0), timeout_s=5.0)
    serving.start()
    try:
        yield serving
    finally:
        serving.stop()


def _address(server: ValueServer) -> str:
    return f"127.0.0.1:{server.port}"


def _value(holder: ArtifactStore, attempt: int = 3) -> tuple[np.ndarray, ArtifactRef]:
    value = np.arange(300_000, dtype=np.int64)  # 2.4 MB: more than one chunk
    return value, holder.put("run1", "make", 0, value, attempt=attempt)


def _ask(server: ValueServer, line: bytes) -> dict[str, object]:
    """Send one raw request line; the server's reply line, parsed."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(line)
        with sock.makefile("rb") as stream:
            return dict(json.loads(stream.readline()))


def test_a_value_is_pulled_into_the_readers_cache_and_reads_the_same(
    keyed: Settings, holder: ArtifactStore, server: ValueServer
) -> None:
    value, ref = _value(holder)
    reader = ArtifactStore(keyed, "reader")
    assert not reader.has_local(ref)
    assert pull_value(reader, ref, _address(server), keyed) == ref.size
    assert reader.has_local(ref) and server.served == 1
    assert np.array_equal(reader.get(ref), value)


@pytest.mark.parametrize(
    "case", ["no grant", "another key", "expired", "another attempt", "another node", "garbage"]
)
def test_a_request_without_a_valid_grant_for_that_value_is_refused(
    holder: ArtifactStore, server: ValueServer, case: str
) -> None:
    _, ref = _value(holder)
    grant = mint(KEY.encode(), ref, 60)
    if case == "another key":
        grant = mint(OTHER_KEY.encode(), ref, 60)
    elif case == "expired":
        grant = mint(KEY.encode(), ref, 5, now=time.time() - 10)
    elif case == "another attempt":
        grant = mint(KEY.encode(), ref.model_copy(update={"attempt": 2}), 60)
    elif case == "another node":
        grant = mint(KEY.encode(), ref.model_copy(update={"node_id": "other"}), 60)
    elif case == "no grant":
        grant = ""
    line = request_line(ref, grant) if case != "garbage" else b"GET / HTTP/1.0\n"
    reply = _ask(server, line)
    assert reply["ok"] is False and reply["refused"] is True, reply
    assert server.served == 0 and server.refused == 1


@pytest.mark.parametrize("node_id", ["../make", "..", "a/../../etc", "make\x00"])
def test_ids_that_try_to_leave_the_cache_are_refused_even_with_a_valid_grant(
    holder: ArtifactStore, server: ValueServer, node_id: str
) -> None:
    _, ref = _value(holder)
    tricky = ref.model_construct(**{**ref.model_dump(), "node_id": node_id})
    reply = _ask(server, request_line(tricky, mint(KEY.encode(), tricky, 60)))
    assert reply["ok"] is False and reply["refused"] is True, reply
    assert server.served == 0


def test_the_reader_refuses_to_keep_a_value_whose_bytes_changed_on_the_wire(
    keyed: Settings,
    holder: ArtifactStore,
    server: ValueServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, ref = _value(holder)

    def flip_one_byte(sock: socket.socket, fh: IO[bytes], size: int) -> bytes:
        data = bytearray(fh.read())
        data[size // 2] ^= 0xFF
        sock.sendall(data)
        return file_digest(fh.fileno(), size, threading.Event())  # the file's, as sent

    monkeypatch.setattr(peer_server, "send_body", flip_one_byte)
    reader = ArtifactStore(keyed, "reader")
    with pytest.raises(PeerTransferError, match="digest mismatch"):
        pull_value(reader, ref, _address(server), keyed)
    assert not reader.has_local(ref)
    left = [p for p in (keyed.cache_dir / "reader").rglob("*") if not p.is_dir()]
    assert not left, "no partial file is left in the reader's cache"


def test_a_reader_with_another_key_is_refused_and_keeps_nothing(
    keyed: Settings, holder: ArtifactStore, server: ValueServer
) -> None:
    _, ref = _value(holder)
    stranger = keyed.model_copy(update={"message_key": SecretStr(OTHER_KEY)})
    reader = ArtifactStore(stranger, "reader")
    with pytest.raises(GrantRefusedError, match="bad grant"):
        pull_value(reader, ref, _address(server), stranger)
    assert not reader.has_local(ref)


def test_a_value_not_held_is_a_transfer_error_not_a_refusal(
    keyed: Settings, holder: ArtifactStore, server: ValueServer
) -> None:
    _, ref = _value(holder)
    missing = ref.model_copy(update={"node_id": "never_made"})
    with pytest.raises(PeerTransferError, match="not held here") as caught:
        pull_value(ArtifactStore(keyed, "reader"), missing, _address(server), keyed)
    assert not isinstance(caught.value, GrantRefusedError)


def test_an_unreachable_holder_is_a_transfer_error(keyed: Settings, holder: ArtifactStore) -> None:
    _, ref = _value(holder)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    with pytest.raises(PeerTransferError, match="pulling from worker 'holder'"):
        pull_value(ArtifactStore(keyed, "reader"), ref, f"127.0.0.1:{port}", keyed)


def test_a_grant_names_exactly_one_value_and_expires() -> None:
    ref = ArtifactRef(run_id="r", node_id="n", iteration=1, codec="json", size=10, attempt=2)
    grant = verify([KEY.encode()], mint(KEY.encode(), ref, 30))
    assert grant.names("r", "n", 1, 2, 10) and not grant.names("r", "n", 1, 1, 10)
    with pytest.raises(GrantRefusedError, match="expired"):
        verify([KEY.encode()], mint(KEY.encode(), ref, 30), now=time.time() + 60)
    rotated = verify([OTHER_KEY.encode(), KEY.encode()], mint(KEY.encode(), ref, 30))
    assert rotated.names("r", "n", 1, 2, 10), "a previous key still verifies (rotation)"
