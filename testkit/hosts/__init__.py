"""A cluster of hosts that share nothing but a network, for tests and benchmarks.

Each host is a Linux network namespace on a bridge, with a mount namespace
of its own (a private ``/dev/shm`` and private directories); Redis and an
S3 server listen on the bridge. Needs root, iproute2 and util-linux; where
it cannot be built, :func:`unavailable_reason` says why (tests skip with it).
See ``docs/testing.md``.
"""

from testkit.hosts.cluster import HostCluster
from testkit.hosts.errors import HostCommandError, HostsUnavailableError
from testkit.hosts.host import Host
from testkit.hosts.names import sweep_leftovers
from testkit.hosts.shell import unavailable_reason
from testkit.hosts.workers import HostWorker

__all__ = [
    "Host",
    "HostCluster",
    "HostCommandError",
    "HostWorker",
    "HostsUnavailableError",
    "sweep_leftovers",
    "unavailable_reason",
]
