"""Direct transfers with real workers on one machine (each with a cache of its own,
the S3 store between them, as on several machines).

- a value made on one worker and read on another is pulled from the holder
  (``peer`` in the run's transfer records) and never touches S3;
- a holder that lies on the wire (one byte flipped) is caught by the digest,
  and the value comes through S3 instead (``fallback`` says why), run intact;
- a holder killed before the value is pulled: the pull fails, its S3 chain waits
  on the dead holder, the reaper recomputes the value elsewhere, run intact;
- a real worker's server refuses a grant made with another key;
- ``SOMATIZE_TRANSFER=s3`` opens no port and moves every value through S3.
"""

from __future__ import annotations

import json
import signal
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import SecretStr
from redis import Redis

from somatize_tasks.config.keys import RedisKeys
from somatize_tasks.config.settings import Settings
from somatize_tasks.runtime.producer.handle import PlanRun
from somatize_tasks.runtime.producer.submit import submit_plan
from somatize_tasks.store import ArtifactRef
from somatize_tasks.store.shared import S3Store
from somatize_tasks.transfer.grants import mint
from somatize_tasks.transfer.peer_protocol import request_line
from somatize_tasks.workers.peers import read_peers
from testkit.plans import ex, remote, seq
from testkit.services import wait_for
from testkit.workers import TEST_NODES, WorkerFactory, WorkerProcess

pytestmark = pytest.mark.slow
KEY = "direct-transfer-key-" + "x" * 16
NODES = f"{TEST_NODES},testkit.nodes.peer_nodes"
SIZE = 3 << 20  # 3 MiB: several chunks, well past the inline limit


def _cleanup(settings: Settings) -> None:
    client = Redis.from_url(settings.redis_url)
    for key in client.scan_iter(match=f"{settings.key_prefix}:*", count=1000):
        client.delete(key)


@pytest.fixture(scope="module")
def cluster(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Settings, dict[str, WorkerProcess]]]:
    """Workers ``holder1`` and ``holder2`` (tag ``holder``), ``reader`` (tag ``reader``),
    ``liar`` (tag ``liar``: its server flips a byte), all with a message key, and
    ``strict`` (tag ``strict``), a reader with ``SOMATIZE_TRANSFER=direct``."""
    root = tmp_path_factory.mktemp("direct")
    keyed = settings.model_copy(
        update={
            "key_prefix": f"{settings.key_prefix}-dt",
            "message_key": SecretStr(KEY),
            "reroute_grace_s": 3.0,
            "transfer_stall_s": 30.0,
            "peer_timeout_s": 5.0,
        }
    )
    factory = WorkerFactory(keyed, root)
    strict = WorkerFactory(keyed.model_copy(update={"transfer": "direct"}), root)
    try:
        started = [
            factory.start(name, tags=tags, nodes=nodes, concurrency=1, wait=False)
            for name, tags, nodes in (
                ("holder1", "holder", NODES),
                ("holder2", "holder", NODES),
                ("reader", "reader", NODES),
                ("liar", "liar", f"{NODES},testkit.nodes.corrupt_serving"),
            )
        ]
        started.append(strict.start("strict", tags="strict", nodes=NODES, concurrency=1))
        for worker in started:
            factory.wait_live(worker)
        yield keyed, {w.worker_id.rsplit("-", 1)[1]: w for w in started}
    finally:
        factory.close()
        strict.close()
        _cleanup(keyed)


def _across(source_tag: str, reader_tag: str = "reader") -> dict[str, Any]:
    """``peer_make`` on ``source_tag``, then ``rt_sleep`` (a gate that reads only the
    run's input) and ``peer_size`` (which reads ``peer_make``'s value) on the reader."""
    return {
        "plan": seq(
            remote(source_tag, ex("peer_make")),
            remote(reader_tag, ex("rt_sleep")),
            remote(reader_tag, ex("peer_size")),
        ),
        "predecessors": {"peer_make": [], "rt_sleep": [], "peer_size": ["peer_make"]},
    }


def _crossing(run: PlanRun) -> list[dict[str, Any]]:
    return [t for t in run.status().transfers if t["from_node"] == "peer_make"]


def _in_s3(settings: Settings, run: PlanRun) -> list[str]:
    store = S3Store(settings)
    listed = store.client.list_objects_v2(Bucket=store.bucket, Prefix=store.object_key(run.id))
    return [item["Key"] for item in listed.get("Contents", [])]


def test_a_value_crossing_workers_is_pulled_from_its_holder_and_skips_s3(
    cluster: tuple[Settings, dict[str, WorkerProcess]],
) -> None:
    settings, _ = cluster
    run = submit_plan(
        _across("holder"),
        params={"peer_make": {"n_bytes": SIZE}, "rt_sleep": {"s": 0.0}},
        settings=settings,
        require_workers=True,
    )
    assert run.wait(timeout=60) == SIZE
    (moved,) = _crossing(run)
    assert moved["transfer_type"] == "peer", moved
    assert moved["bytes"] > SIZE and moved["to_worker"].endswith("-reader")
    assert "fallback" not in moved and moved["seconds"] > 0
    assert not [k for k in _in_s3(settings, run) if "/peer_make/" in k], "no S3 copy made"


def test_a_value_whose_bytes_change_on_the_wire_comes_through_s3_instead(
    cluster: tuple[Settings, dict[str, WorkerProcess]],
) -> None:
    settings, workers = cluster
    run = submit_plan(
        _across("liar"),
        params={"peer_make": {"n_bytes": SIZE}, "rt_sleep": {"s": 0.0}},
        settings=settings,
        require_workers=True,
    )
    assert run.wait(timeout=60) == SIZE
    (moved,) = _crossing(run)
    assert moved["transfer_type"] == "s3", moved
    assert "digest mismatch" in moved["fallback"]
    assert "sending it through S3" in workers["reader"].log()


def test_a_holder_killed_before_the_pull_costs_a_recompute_not_the_run(
    cluster: tuple[Settings, dict[str, WorkerProcess]],
) -> None:
    settings, workers = cluster
    run = submit_plan(
        _across("holder"),
        params={"peer_make": {"n_bytes": SIZE}, "rt_sleep": {"s": 4.0}},
        settings=settings,
        require_workers=True,
    )

    def gate_running() -> bool:
        gate = run.status().nodes.get("rt_sleep")
        return gate is not None and gate.state == "running"

    assert wait_for(gate_running, 30)
    victim = run.status().nodes["peer_make"].worker
    name = str(victim).rsplit("-", 1)[1]
    workers[name].signal_group(signal.SIGKILL)
    try:
        assert run.wait(timeout=90) == SIZE
        assert "sending it through S3" in workers["reader"].log()
        remade = run.status().nodes["peer_make"].worker
        assert remade not in (None, victim), "peer_make was recomputed on the other holder"
        assert {t["transfer_type"] for t in _crossing(run)} <= {"peer", "s3"}
    finally:
        workers.pop(name)


def test_a_real_worker_refuses_a_grant_made_with_another_key(
    cluster: tuple[Settings, dict[str, WorkerProcess]],
) -> None:
    settings, workers = cluster
    holder = workers["reader"].worker_id
    client = Redis.from_url(settings.redis_url)
    peer = read_peers(client, RedisKeys(settings.key_prefix), [holder])[holder]
    assert peer is not None and peer.address is not None
    host, port = peer.address.rsplit(":", 1)
    ref = ArtifactRef(run_id="r", node_id="n", codec="bytes", size=10, worker_id=holder)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request_line(ref, mint(b"not-the-key-" * 3, ref, 60)))
        reply = json.loads(sock.makefile("rb").readline())
    assert reply["ok"] is False and reply["refused"] is True
    assert "bad grant" in reply["error"]


@pytest.fixture(scope="module")
def s3_only(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Settings, list[WorkerProcess]]]:
    root = tmp_path_factory.mktemp("s3-only")
    chosen = settings.model_copy(
        update={
            "key_prefix": f"{settings.key_prefix}-s3o",
            "message_key": SecretStr(KEY),
            "transfer": "s3",
        }
    )
    factory = WorkerFactory(chosen, root)
    try:
        pair = [
            factory.start(name, tags=tag, nodes=NODES, concurrency=1)
            for name, tag in (("holder", "holder"), ("reader", "reader"))
        ]
        yield chosen, pair
    finally:
        factory.close()
        _cleanup(chosen)


def test_s3_mode_opens_no_port_and_moves_values_through_s3_only(
    s3_only: tuple[Settings, list[WorkerProcess]],
) -> None:
    settings, pair = s3_only
    run = submit_plan(
        _across("holder"),
        params={"peer_make": {"n_bytes": SIZE}, "rt_sleep": {"s": 0.0}},
        settings=settings,
        require_workers=True,
    )
    assert run.wait(timeout=60) == SIZE
    assert [t["transfer_type"] for t in _crossing(run)] == ["s3"]
    client = Redis.from_url(settings.redis_url)
    announced = read_peers(client, RedisKeys(settings.key_prefix), [w.worker_id for w in pair])
    assert all(p is not None and p.address is None for p in announced.values()), announced
    assert all("serves no values to others" in w.log() for w in pair)
    assert any("/peer_make/" in k for k in _in_s3(settings, run))


def test_a_reader_that_announced_nothing_gets_the_s3_chain(
    cluster: tuple[Settings, dict[str, WorkerProcess]],
) -> None:
    """A worker from before direct transfers announces no peer entry and does not know
    the pull task: values reach it through S3, as before (no pull tried, no fallback)."""
    settings, workers = cluster
    client = Redis.from_url(settings.redis_url)
    keys = RedisKeys(settings.key_prefix)
    reader = workers["reader"].worker_id
    entry = client.hget(keys.workers_peers, reader)
    assert entry is not None
    client.hdel(keys.workers_peers, reader)
    try:
        run = submit_plan(
            _across("holder"),
            params={"peer_make": {"n_bytes": SIZE}, "rt_sleep": {"s": 0.0}},
            settings=settings,
            require_workers=True,
        )
        assert run.wait(timeout=60) == SIZE
    finally:
        client.hset(keys.workers_peers, reader, entry)
    (moved,) = _crossing(run)
    assert moved["transfer_type"] == "s3" and "fallback" not in moved, moved


def test_direct_mode_never_falls_back_a_failed_pull_fails_the_run_naming_it(
    cluster: tuple[Settings, dict[str, WorkerProcess]],
) -> None:
    """``SOMATIZE_TRANSFER=direct`` on the reader: the liar's bytes never check out, the
    pull is retried (``transfer_max_retries``), then the run fails saying why. (Signed
    retries: every retry used to be refused, its old signature republished over the new
    one, so the block hung until the reaper re-dispatched it, again and again.)"""
    settings, workers = cluster
    run = submit_plan(
        _across("liar", reader_tag="strict"),
        params={"peer_make": {"n_bytes": SIZE}, "rt_sleep": {"s": 0.0}},
        settings=settings,
        require_workers=True,
    )
    with pytest.raises(Exception, match="digest mismatch") as failed:
        run.wait(timeout=60)
    assert "could not move an input of node 'peer_size'" in str(failed.value)
    assert not _crossing(run), "nothing arrived, through S3 or otherwise"
    assert "sending it through S3" not in workers["strict"].log()
