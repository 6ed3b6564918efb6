"""Direct transfers across hosts that share nothing but a network.

Two workers of their own (on hosts ``a`` and ``b``) with a message key, so they
serve their values to each other, under a key prefix of their own:

- a value made on ``a`` and read on ``b`` moves directly (``peer``), over the link;
- with ``a`` cut from its peers but not from Redis or S3, the pull times out and the
  value goes through S3 instead (``s3``, ``fallback`` saying why): the run ends right.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import SecretStr

from somatize_tasks.config.settings import Settings
from somatize_tasks.runtime.producer.handle import PlanRun
from somatize_tasks.runtime.producer.submit import submit_plan
from testkit.hosts import HostCluster, HostWorker
from testkit.plans import ex, remote, seq
from testkit.workers import TEST_NODES

KEY = "multihost-direct-" + "k" * 24
NODES = f"{TEST_NODES},testkit.nodes.peer_nodes"
SIZE = 8 << 20


@pytest.fixture(scope="module")
def direct_hosts(
    host_cluster: HostCluster, mh_settings: Settings
) -> Iterator[tuple[Settings, dict[str, HostWorker]]]:
    keyed = mh_settings.model_copy(
        update={
            "key_prefix": f"{host_cluster.key_prefix}d",
            "message_key": SecretStr(KEY),
            "peer_timeout_s": 3.0,
        }
    )
    workers = {
        host: host_cluster.start_worker(
            host, name=f"d{host}", tags=f"d-{host}", nodes=NODES, settings=keyed, wait=False
        )
        for host in ("a", "b")
    }
    for worker in workers.values():
        host_cluster.wait_live(worker)
    try:
        yield keyed, workers
    finally:
        for worker in workers.values():
            worker.stop(timeout_s=3.0)


def _edge() -> dict[str, Any]:
    return seq(remote("d-a", ex("peer_make")), remote("d-b", ex("peer_size")))


def _crossing(run: PlanRun) -> dict[str, Any]:
    (moved,) = [t for t in run.status().transfers if t["from_node"] == "peer_make"]
    return dict(moved)


def test_a_value_crossing_hosts_moves_directly(
    direct_hosts: tuple[Settings, dict[str, HostWorker]],
) -> None:
    settings, workers = direct_hosts
    run = submit_plan(
        _edge(), params={"peer_make": {"n_bytes": SIZE}}, settings=settings, require_workers=True
    )
    assert run.wait(timeout=60) == SIZE
    moved = _crossing(run)
    assert moved["transfer_type"] == "peer", moved
    assert (moved["from_worker"], moved["to_worker"]) == (
        workers["a"].worker_id,
        workers["b"].worker_id,
    )
    assert "fallback" not in moved


def test_a_host_cut_from_its_peers_but_not_redis_or_s3_falls_back_to_s3(
    host_cluster: HostCluster, direct_hosts: tuple[Settings, dict[str, HostWorker]]
) -> None:
    settings, workers = direct_hosts
    host_cluster.isolate("a", peers=True, s3=False, redis=False)
    try:
        run = submit_plan(
            _edge(),
            params={"peer_make": {"n_bytes": SIZE}},
            settings=settings,
            require_workers=True,
        )
        assert run.wait(timeout=90) == SIZE
    finally:
        host_cluster.rejoin("a")
    moved = _crossing(run)
    assert moved["transfer_type"] == "s3", moved
    assert "pulling from worker" in moved["fallback"], moved
    assert "sending it through S3" in workers["b"].log()
