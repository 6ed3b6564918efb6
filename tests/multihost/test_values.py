"""Values of every size tier made on one host and read on another, checked byte for byte,
and seen to cross through S3: hosts share no directory to cross through."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest

from somatize_tasks.config.settings import Settings
from somatize_tasks.runtime.producer.submit import submit_plan
from testkit.hosts import HostCluster
from testkit.nodes.host_nodes import make_array, make_blob
from testkit.plans import ex, par, seq
from tests.multihost.fleet import HostWorkers
from tests.multihost.helpers import RUN_TIMEOUT_S, crossings, hosts_of, on

pytestmark = [pytest.mark.multihost, pytest.mark.slow]

LARGE_MB = 12  # over the 8 MiB multipart threshold: uploaded in parts


def s3_size(cluster: HostCluster, settings: Settings, run_id: str, node_id: str) -> int | None:
    """The size of a node's value in the cluster's bucket (the key of any attempt at it:
    ``<run>/<node>/0`` or ``<run>/<node>/0.<attempt>``), None if it is not there."""
    client = cluster.s3.client()
    key = f"{settings.s3_prefix}/{run_id}/{node_id}/0"
    listed = client.list_objects_v2(Bucket=cluster.s3.bucket, Prefix=key)  # type: ignore[attr-defined]
    sizes = [
        item["Size"]
        for item in listed.get("Contents", [])
        if item["Key"] == key or re.fullmatch(rf"{re.escape(key)}\.\d+", item["Key"])
    ]
    return max(sizes) if sizes else None


def test_an_inline_value_crosses_inside_the_message(
    mh_settings: Settings, hosts: HostWorkers, host_cluster: HostCluster
) -> None:
    run = submit_plan(
        seq(on("a", ex("rt_add")), on("b", ex("mh_where"))),
        input=1,
        settings=mh_settings,
        require_workers=True,
    )
    assert run.wait(timeout=RUN_TIMEOUT_S) == {"worker": hosts["b"].worker_id, "value": 2}
    assert crossings(run, hosts) == {("rt_add", "mh_where", "a", "b", "direct")}
    assert s3_size(host_cluster, mh_settings, run.id, "rt_add") is None


def test_a_medium_value_crosses_through_s3_byte_for_byte(
    mh_settings: Settings, hosts: HostWorkers, host_cluster: HostCluster
) -> None:
    run = submit_plan(
        seq(on("a", ex("mh_blob")), on("c", ex("mh_digest"))),
        params={"mh_blob": {"kb": 256, "seed": 7}},
        settings=mh_settings,
        require_workers=True,
    )
    expected = make_blob(256, 7)
    assert run.wait(timeout=RUN_TIMEOUT_S) == {
        "sha256": hashlib.sha256(expected).hexdigest(),
        "size": len(expected),
        "kind": "bytes",
    }
    assert crossings(run, hosts) == {("mh_blob", "mh_digest", "a", "c", "s3")}
    assert (s3_size(host_cluster, mh_settings, run.id, "mh_blob") or 0) >= len(expected)
    assert run.result("mh_blob") == expected  # and the producer reads it back from S3


def test_a_large_array_reaches_two_hosts_byte_for_byte(
    mh_settings: Settings, hosts: HostWorkers, host_cluster: HostCluster
) -> None:
    run = submit_plan(
        seq(on("a", ex("mh_array")), par(on("b", ex("mh_digest")), on("c", ex("mh_digest_2")))),
        params={"mh_array": {"mb": LARGE_MB, "seed": 3}},
        ops={"mh_digest_2": "mh_digest"},
        settings=mh_settings,
        require_workers=True,
    )
    expected = make_array(LARGE_MB, 3)
    digest = {
        "sha256": hashlib.sha256(expected.tobytes()).hexdigest(),
        "size": expected.nbytes,
        "kind": f"ndarray:uint8:[{expected.nbytes}]",
    }
    assert run.wait(timeout=RUN_TIMEOUT_S) == {"mh_digest": digest, "mh_digest_2": digest}
    assert hosts_of(run, hosts) == {"mh_array": "a", "mh_digest": "b", "mh_digest_2": "c"}
    assert crossings(run, hosts) == {
        ("mh_array", "mh_digest", "a", "b", "s3"),
        ("mh_array", "mh_digest_2", "a", "c", "s3"),
    }
    assert (s3_size(host_cluster, mh_settings, run.id, "mh_array") or 0) >= expected.nbytes
    got = run.result("mh_array")
    assert isinstance(got, np.ndarray) and got.dtype == expected.dtype
    assert got.tobytes() == expected.tobytes()
