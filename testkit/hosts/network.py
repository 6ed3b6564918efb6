"""The cluster's network: a bridge in the root namespace, one veth pair per host, ``tc``.

Addresses are ``10.213.X.0/24`` with ``X`` picked at random among the /24s
no interface here uses, so two clusters never overlap. The bridge holds
``.1`` (Redis listens there) and ``.2`` (the S3 server), hosts take
``.11`` upwards. A host's namespace has one route, its /24: it can reach
nothing but the cluster (IP forwarding is not involved; hosts talk across
the bridge).

Each end of a host's link gets the same ``tc`` tree: an HTB root whose
default class 1:10 carries traffic (through a ``tbf`` leaf when the link is
shaped) and a class 1:20 whose leaf is the ``blackhole`` qdisc. Cutting a
host off from some addresses adds ``u32`` filters steering packets to or
from them into 1:20: dropped silently, as by a dead switch port, in both
directions; or, to have connections fail at once as behind a rejecting
firewall, ``unreachable`` routes inside the host. Only HTB, TBF, blackhole,
u32 and routes are needed: no iptables, nftables or tc actions, which many
kernels and containers lack.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from testkit.hosts.errors import HostCommandError
from testkit.hosts.names import ClusterNames
from testkit.hosts.shell import sh

FIRST_OCTETS = "10.213"
REDIS_LAST, S3_LAST, FIRST_HOST_LAST = 1, 2, 11
#: A host's interface inside its namespace.
HOST_IFACE = "eth0"
_RATE = re.compile(r"^(?P<n>\d+(?:\.\d+)?)(?P<unit>[kmg]?)bit$")
_UNIT = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}


@dataclass(frozen=True)
class Subnet:
    """``10.213.<third>.0/24``."""

    third: int

    def address(self, last: int) -> str:
        return f"{FIRST_OCTETS}.{self.third}.{last}"

    def cidr(self, last: int) -> str:
        return f"{self.address(last)}/24"


def rate_bytes_per_s(rate: str) -> float:
    """``"1gbit"`` -> 125e6: the ``tc`` rates this cluster accepts (bit, kbit, mbit, gbit)."""
    match = _RATE.match(rate.lower())
    if match is None:
        raise ValueError(f"link rate {rate!r}: write it as tc does, e.g. 1gbit, 100mbit")
    return float(match["n"]) * _UNIT[match["unit"]] / 8


def _subnets_in_use() -> set[int]:
    text = sh(["ip", "-o", "-4", "addr", "show"]) + sh(
        ["ip", "-4", "route", "show", "table", "all"]
    )
    return {int(third) for third in re.findall(rf"\b{re.escape(FIRST_OCTETS)}\.(\d+)\.", text)}


def _holders(subnet: Subnet) -> set[str]:
    """The interfaces holding an address in ``subnet``."""
    prefix = f"{subnet.address(0).rsplit('.', 1)[0]}."
    holders = set()
    for line in sh(["ip", "-o", "-4", "addr", "show"]).splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[3].startswith(prefix):
            holders.add(fields[1])
    return holders


def make_bridge(names: ClusterNames, attempts: int = 20) -> Subnet:
    """The cluster's bridge, up, holding ``.1`` and ``.2`` of a /24 nobody else uses."""
    sh(["ip", "link", "add", names.bridge, "type", "bridge"])
    for _ in range(attempts):
        free = sorted(set(range(1, 255)) - _subnets_in_use())
        if not free:
            break
        subnet = Subnet(random.choice(free))
        for last in (REDIS_LAST, S3_LAST):
            sh(["ip", "addr", "add", subnet.cidr(last), "dev", names.bridge])
        if _holders(subnet) == {names.bridge}:  # no other cluster took it meanwhile
            sh(["ip", "link", "set", names.bridge, "up"])
            return subnet
        sh(["ip", "addr", "flush", "dev", names.bridge])
    raise HostCommandError(f"no free /24 left in {FIRST_OCTETS}.0.0/16 for a cluster bridge")


def _tc(netns: str | None, *args: str, check: bool = True) -> None:
    sh(["tc", *(("-n", netns) if netns else ()), *args], check=check)


def install_qdiscs(device: str, netns: str | None, rate: str | None) -> None:
    """The HTB tree of the module doc on one end of a link, shaped to ``rate`` if given."""
    _tc(netns, "qdisc", "add", "dev", device, "root", "handle", "1:", "htb", "default", "10")
    _tc(
        netns,
        *("class", "add", "dev", device, "parent", "1:", "classid", "1:10", "htb"),
        *("rate", "100gbit", "burst", "16mb", "cburst", "16mb", "quantum", "60000"),
    )
    if rate is not None:
        burst = max(int(rate_bytes_per_s(rate) / 100), 64 * 1024)  # 10 ms of traffic
        _tc(
            netns,
            *("qdisc", "add", "dev", device, "parent", "1:10", "handle", "10:", "tbf"),
            *("rate", rate, "burst", str(burst), "latency", "50ms"),
        )
    _tc(
        netns,
        *("class", "add", "dev", device, "parent", "1:", "classid", "1:20", "htb"),
        *("rate", "1mbit", "quantum", "1514"),
    )
    _tc(netns, "qdisc", "add", "dev", device, "parent", "1:20", "handle", "20:", "blackhole")


def add_host_link(
    names: ClusterNames, index: int, netns: str, address_cidr: str, rate: str | None
) -> str:
    """Host ``index``'s namespace and veth pair on the bridge; returns the bridge-side link."""
    link = names.link(index)
    sh(["ip", "netns", "add", netns])
    sh(["ip", "link", "add", link, "type", "veth", "peer", "name", HOST_IFACE, "netns", netns])
    sh(["ip", "link", "set", link, "master", names.bridge, "up"])
    sh(["ip", "-n", netns, "addr", "add", address_cidr, "dev", HOST_IFACE])
    sh(["ip", "-n", netns, "link", "set", HOST_IFACE, "up"])
    sh(["ip", "-n", netns, "link", "set", "lo", "up"])
    install_qdiscs(link, None, rate)
    install_qdiscs(HOST_IFACE, netns, rate)
    return link


def set_link(link: str, up: bool) -> None:
    """The bridge side of a host's link up or down: down is a pulled cable."""
    sh(["ip", "link", "set", link, "up" if up else "down"])


def drop_between(link: str, netns: str, addresses: Iterable[str]) -> None:
    """Silently drop every packet between the host on ``link``/``netns`` and ``addresses``."""
    for address in addresses:
        _tc(netns, *_filter(HOST_IFACE, "dst", address))
        _tc(None, *_filter(link, "src", address))


def _filter(device: str, direction: str, address: str) -> Sequence[str]:
    return (
        *("filter", "add", "dev", device, "parent", "1:", "protocol", "ip", "prio", "1"),
        *("u32", "match", "ip", direction, f"{address}/32", "flowid", "1:20"),
    )


def refuse_from(netns: str, addresses: Iterable[str]) -> None:
    """The host's connections to ``addresses`` fail at once (``EHOSTUNREACH``), as behind a
    firewall that rejects: an ``unreachable`` route per address inside the namespace.
    (Packets from those addresses still arrive; the host's replies go nowhere.)"""
    for address in addresses:
        sh(["ip", "-n", netns, "route", "add", "unreachable", f"{address}/32"])


def clear_drops(link: str, netns: str) -> None:
    """Remove every filter :func:`drop_between` and route :func:`refuse_from` added."""
    _tc(netns, "filter", "del", "dev", HOST_IFACE, "parent", "1:", "prio", "1", check=False)
    _tc(None, "filter", "del", "dev", link, "parent", "1:", "prio", "1", check=False)
    sh(["ip", "-n", netns, "route", "flush", "type", "unreachable"], check=False)


def remove(names: ClusterNames, links: Sequence[str], namespaces: Sequence[str]) -> None:
    """Delete the links, namespaces and bridge (whatever of them exists)."""
    for link in links:
        sh(["ip", "link", "del", link], check=False)
    for netns in namespaces:
        sh(["ip", "netns", "del", netns], check=False)
    sh(["ip", "link", "del", names.bridge], check=False)
