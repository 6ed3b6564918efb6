"""Three hosts that share nothing but a network, started once for this folder's tests
(package scope: they are gone before the rest of the suite runs).

- ``host_cluster``: a :class:`~testkit.hosts.HostCluster` of hosts ``a``, ``b``,
  ``c`` (network namespaces on a bridge, 1 Gbit/s links, a private ``/dev/shm``
  and private directories each), Redis and moto's S3 server on the bridge.
  Skips every test here, with the reason, where it cannot be built (not root,
  no iproute2).
- ``mh_settings``: the producer's settings (the test process, in the root
  namespace).
- ``hosts``: one worker per host, tagged ``cpu``, ``on-<host>``, and ``spare``
  on ``b`` and ``c`` (a node tagged ``spare`` can move between them).
- ``healthy_hosts``: for tests that break things: afterwards, every link is
  healed and rejoined and a host whose worker died gets a new one.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from somatize_tasks.config.settings import Settings
from testkit.hosts import HostCluster, unavailable_reason
from tests.multihost.fleet import HOSTS, HostWorkers


@pytest.fixture(scope="package")
def host_cluster() -> Iterator[HostCluster]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"no multi-host cluster on this machine: {reason}")
    with HostCluster(HOSTS, rate="1gbit") as cluster:
        yield cluster


@pytest.fixture(scope="package")
def mh_settings(host_cluster: HostCluster) -> Settings:
    # A stalled transfer is sent again after 10 s (60 s by default): partitions end sooner.
    return host_cluster.settings(reroute_grace_s=3.0, transfer_stall_s=10.0, max_transfer_stalls=2)


@pytest.fixture(scope="package")
def hosts(host_cluster: HostCluster, mh_settings: Settings) -> HostWorkers:
    workers = HostWorkers(host_cluster, mh_settings)
    workers.start(HOSTS)
    return workers


@pytest.fixture
def healthy_hosts(hosts: HostWorkers) -> Iterator[HostWorkers]:
    """``hosts``, put back to health after the test (whatever it broke)."""
    yield hosts
    hosts.restore()
