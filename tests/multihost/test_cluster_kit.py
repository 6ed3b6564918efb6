"""The cluster kit itself: names, link faults, two clusters side by side, cleanup after a
crash. A small cluster of its own (two hosts, no workers) so nothing here disturbs the
other tests' hosts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from testkit.hosts import HostCluster, sweep_leftovers, unavailable_reason
from testkit.hosts.names import IFNAME_MAX, ClusterNames
from testkit.hosts.network import rate_bytes_per_s
from testkit.hosts.shell import sh
from testkit.services import wait_for
from testkit.workers import REPO

pytestmark = pytest.mark.multihost

PROBE = """
import errno, socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1.0).close()
    print("open")
except socket.timeout:
    print("timeout")
except OSError as e:
    print(errno.errorcode.get(e.errno or 0, type(e).__name__))
"""
LISTEN = """
import socket, sys, time
s = socket.socket(); s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(16)
while True:
    s.accept()[0].close()
"""
PEER_PORT = 18777


def test_names_fit_linux_limits_and_say_their_owner() -> None:
    names = ClusterNames(pid=4194303, tag="ff")  # the largest pid Linux hands out
    assert len(names.bridge) <= IFNAME_MAX and len(names.link(99)) <= IFNAME_MAX
    assert names.netns("a").startswith(names.stem) and str(4194303) not in names.stem
    with pytest.raises(ValueError, match="host name"):
        names.netns("A b")
    assert rate_bytes_per_s("1gbit") == 125e6 and rate_bytes_per_s("100mbit") == 12.5e6
    with pytest.raises(ValueError, match="link rate"):
        rate_bytes_per_s("fast")


@pytest.fixture(scope="module")
def pair() -> Iterator[HostCluster]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"no multi-host cluster on this machine: {reason}")
    with HostCluster(("p", "q"), rate=None) as cluster:
        q = cluster.hosts["q"]
        listener = q.popen(
            [sys.executable, "-c", LISTEN, q.address, str(PEER_PORT)],
            log_path=(cluster.root or REPO) / "logs" / "listen.log",
        )
        try:
            yield cluster
        finally:
            listener.kill()
            listener.wait()


def reach(cluster: HostCluster, host: str, address: str, port: int) -> str:
    return cluster.hosts[host].run([sys.executable, "-c", PROBE, address, str(port)]).stdout.strip()


def probes(cluster: HostCluster) -> dict[str, str]:
    """What host p reaches: Redis, S3 and its peer q."""
    redis, s3 = urlsplit(cluster.redis_url), urlsplit(cluster.s3.url)
    return {
        "redis": reach(cluster, "p", str(redis.hostname), int(redis.port or 0)),
        "s3": reach(cluster, "p", str(s3.hostname), int(s3.port or 0)),
        "peer": reach(cluster, "p", cluster.hosts["q"].address, PEER_PORT),
    }


def test_cut_heal_isolate_and_rejoin_do_what_they_say(pair: HostCluster) -> None:
    everything = {"redis": "open", "s3": "open", "peer": "open"}
    assert probes(pair) == everything
    pair.cut("p")
    cut = probes(pair)
    assert "open" not in cut.values(), cut
    pair.heal("p")
    # As after a cable plugged back: the host relearns its neighbours' addresses (ARP)
    # first, and until then a connection may fail at once (EHOSTUNREACH).
    assert wait_for(lambda: probes(pair) == everything, 15), probes(pair)
    pair.isolate("p", peers=True, s3=True, redis=False)
    assert probes(pair) == {"redis": "open", "s3": "timeout", "peer": "timeout"}
    pair.rejoin("p")
    assert probes(pair) == everything
    pair.isolate("p", peers=True, s3=False, redis=False, refuse=True)
    assert probes(pair) == {"redis": "open", "s3": "open", "peer": "EHOSTUNREACH"}
    pair.rejoin("p")
    assert probes(pair) == everything


def test_two_clusters_live_side_by_side(pair: HostCluster) -> None:
    with HostCluster(("p",), rate="100mbit") as other:
        assert other.names.stem != pair.names.stem
        assert other.subnet != pair.subnet
        assert probes(pair)["peer"] == "open"
        # A host of one cluster cannot reach the other's services.
        redis = urlsplit(other.redis_url)
        assert reach(pair, "p", str(redis.hostname), int(redis.port or 0)) == "ENETUNREACH"
        assert "tbf" in sh(["tc", "qdisc", "show", "dev", other.names.link(0)])


CRASHING = """
import os, sys, time
from testkit.hosts import HostCluster
cluster = HostCluster(("x", "y")).start()
cluster.hosts["x"].popen(["sleep", "600"], log_path=cluster.root / "logs" / "sleep.log")
print(cluster.names.stem, flush=True)
time.sleep(600)
"""


def test_what_a_killed_process_left_is_swept(pair: HostCluster) -> None:
    crashing = subprocess.Popen(
        [sys.executable, "-c", CRASHING],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert crashing.stdout is not None
    stem = crashing.stdout.readline().strip()
    assert stem.startswith("smh"), stem
    crashing.send_signal(signal.SIGKILL)
    crashing.wait(10)

    def leftovers() -> list[str]:
        listed = sh(["ip", "netns", "list"]) + sh(["ip", "-o", "link", "show"])
        return [line for line in listed.splitlines() if stem in line]

    assert leftovers(), "the killed process left nothing to sweep: the test proves nothing"
    removed = sweep_leftovers()
    assert any(stem in r for r in removed), removed
    deadline = time.monotonic() + 10  # a namespace's links go a moment after it
    while leftovers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not leftovers()
    assert not list(Path(tempfile.gettempdir()).glob(f"{stem}-*"))  # its directory too
    assert probes(pair)["peer"] == "open"  # a live cluster's things are never swept
