"""The hosts really share nothing but the network: no ``/dev/shm``, no directory, no
loopback. A test that passed on one machine by accident would fail here."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

from somatize_tasks.config.settings import Settings
from somatize_tasks.runtime.producer.submit import submit_plan
from testkit.hosts import HostCluster
from testkit.plans import ex, par, seq
from tests.multihost.fleet import HostWorkers
from tests.multihost.helpers import RUN_TIMEOUT_S, on

pytestmark = [pytest.mark.multihost, pytest.mark.slow]


def test_a_file_in_one_hosts_dev_shm_is_seen_by_no_other_host(
    mh_settings: Settings, hosts: HostWorkers, host_cluster: HostCluster
) -> None:
    name = f"mh-probe-{uuid.uuid4().hex[:8]}"
    path = f"/dev/shm/{name}"
    a_cache = str(host_cluster.hosts["a"].cache_dir)
    looks = {"paths": [path, a_cache]}
    run = submit_plan(
        seq(on("a", ex("mh_mark")), par(*(on(h, ex(f"mh_look_{h}")) for h in "abc"))),
        params={"mh_mark": {"name": name}, **{f"mh_look_{h}": looks for h in "abc"}},
        ops={f"mh_look_{h}": "mh_look" for h in "abc"},
        settings=mh_settings,
        require_workers=True,
    )
    seen = run.wait(timeout=RUN_TIMEOUT_S)
    assert run.result("mh_mark") == {"worker": hosts["a"].worker_id, "path": path}
    assert {h: seen[f"mh_look_{h}"]["worker"] for h in "abc"} == {
        h: hosts[h].worker_id for h in "abc"
    }
    assert seen["mh_look_a"]["exists"] == {path: True, a_cache: True}
    assert (
        seen["mh_look_b"]["exists"]
        == seen["mh_look_c"]["exists"]
        == {
            path: False,
            a_cache: False,
        }
    )
    assert not Path(path).exists()  # nor does the machine's own /dev/shm hold it
    # A command run on host a sees what its worker wrote: the same mounts.
    assert host_cluster.hosts["a"].run(["cat", path]).stdout == hosts["a"].worker_id
    assert host_cluster.hosts["b"].run(["ls", "/dev/shm"]).stdout.split().count(name) == 0


def test_a_hosts_directories_are_its_own(host_cluster: HostCluster, hosts: HostWorkers) -> None:
    a, b = host_cluster.hosts["a"], host_cluster.hosts["b"]
    marker = a.cache_dir / f"mh-{uuid.uuid4().hex[:8]}"
    a.run(["touch", str(marker)])
    assert a.run(["ls", str(a.cache_dir)]).stdout.split().count(marker.name) == 1
    assert not marker.exists()  # the root namespace sees an empty folder there
    assert b.run(["test", "-e", str(marker)], check=False).returncode == 1
    for host in (a, b):
        assert hosts[host.name].settings.cache_dir == host.cache_dir


def test_hosts_reach_the_bridge_but_not_each_others_loopback(
    host_cluster: HostCluster, hosts: HostWorkers
) -> None:
    port = int(host_cluster.redis_url.rsplit(":", 1)[1].split("/")[0])
    probe = (
        "import errno, socket, sys\n"
        "try:\n"
        "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()\n"
        "    print('open')\n"
        "except OSError as e:\n"
        "    print(errno.errorcode.get(e.errno or 0, type(e).__name__))\n"
    )
    b = host_cluster.hosts["b"]

    def reach(address: str) -> str:
        return b.run([sys.executable, "-c", probe, address, str(port)]).stdout.strip()

    assert reach(host_cluster.bridge_address) == "open"
    assert reach("127.0.0.1") == "ECONNREFUSED"  # the host's own loopback
    # A documentation address: no route leads out of the cluster, so nothing is sent.
    assert reach("198.51.100.1") == "ENETUNREACH"
