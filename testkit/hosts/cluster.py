"""``HostCluster``: N hosts sharing nothing but a network, with Redis and S3 on the bridge.

    with HostCluster(("a", "b", "c"), rate="1gbit") as cluster:
        worker = cluster.start_worker("a", tags="cpu")
        run = submit_plan(plan, settings=cluster.settings(), require_workers=True)
        cluster.cut("a"); ...; cluster.heal("a")

:meth:`start` first removes whatever a crashed cluster left (its process is
gone), then builds the bridge, the hosts and the services; :meth:`stop`
removes all of it, and runs at interpreter exit if nobody called it.
``timings`` holds how long each took.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import shutil
import time
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from somatize_tasks.config.settings import Settings
from testkit.hosts import network
from testkit.hosts.host import Host
from testkit.hosts.names import ClusterNames, sweep_leftovers
from testkit.hosts.services import BridgeRedis, BridgeS3
from testkit.hosts.shell import require_hosts
from testkit.hosts.workers import HostWorker, host_settings, start_host_worker, stop_workers
from testkit.services import S3Endpoint
from testkit.workers import TEST_NODES, wait_live

log = logging.getLogger(__name__)


class HostCluster:
    """Hosts ``names`` (lowercase, short) as namespaces on one bridge; links shaped to
    ``rate`` (a ``tc`` rate such as ``"1gbit"``; None: as fast as the machine goes)."""

    def __init__(self, names: Sequence[str] = ("a", "b", "c"), *, rate: str | None = "1gbit"):
        if len(set(names)) != len(names) or not names:
            raise ValueError(f"host names must be distinct and at least one: {list(names)}")
        self.names = ClusterNames()
        for name in names:
            self.names.netns(name)  # a bad host name is refused here, before anything is built
        self.host_names = list(names)
        self.rate = rate
        self.key_prefix = f"mh{uuid.uuid4().hex[:8]}"
        self.hosts: dict[str, Host] = {}
        self.workers: list[HostWorker] = []
        self.timings: dict[str, float] = {}
        self.root: Path | None = None
        self.subnet: network.Subnet | None = None
        self._redis: BridgeRedis | None = None
        self._s3 = BridgeS3("")
        self._stopped = False

    # --- life ----------------------------------------------------------------------------

    def start(self) -> HostCluster:
        require_hosts()
        began = time.monotonic()
        for removed in sweep_leftovers():
            log.warning("removed a crashed cluster's leftover: %s", removed)
        atexit.register(self.stop)
        try:
            self._build()
        except BaseException:
            self.stop()
            raise
        self.timings["start_s"] = time.monotonic() - began
        return self

    def _build(self) -> None:
        self.root = self.names.root_dir()
        (self.root / "logs").mkdir()
        self.subnet = network.make_bridge(self.names)
        for index, name in enumerate(self.host_names):
            netns = self.names.netns(name)
            last = network.FIRST_HOST_LAST + index
            host = Host(
                name=name,
                index=index,
                address=self.subnet.address(last),
                netns=netns,
                link=self.names.link(index),
                private_dir=self.root / "hosts" / name,
                log_dir=self.root / "logs",
            )
            self.hosts[name] = host
            network.add_host_link(self.names, index, netns, self.subnet.cidr(last), self.rate)
            host.start_anchor()
        self._redis = BridgeRedis(
            self.subnet.address(network.REDIS_LAST), self.root / "logs" / "redis.log"
        )
        self._redis.start()
        self._s3 = BridgeS3(self.subnet.address(network.S3_LAST))
        self._s3.start()

    def stop(self) -> None:
        """Stop every worker, host and service; remove every namespace, link and file."""
        if self._stopped:
            return
        self._stopped = True
        began = time.monotonic()
        stop_workers(self.workers, grace_s=3.0)
        for host in self.hosts.values():
            host.stop()
        network.remove(
            self.names,
            [self.names.link(i) for i in range(len(self.host_names))],
            [self.names.netns(name) for name in self.host_names],
        )
        if self._redis is not None:
            self._redis.stop()
        with contextlib.suppress(Exception):
            self._s3.stop()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
        atexit.unregister(self.stop)
        self.timings["stop_s"] = time.monotonic() - began

    def __enter__(self) -> HostCluster:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- what producers and workers connect to -------------------------------------------

    @property
    def redis_url(self) -> str:
        assert self._redis is not None, "start the cluster first"
        return self._redis.url

    @property
    def s3(self) -> S3Endpoint:
        assert self._s3.endpoint is not None, "start the cluster first"
        return self._s3.endpoint

    @property
    def bridge_address(self) -> str:
        """The root namespace's address on the bridge (Redis listens there)."""
        assert self.subnet is not None, "start the cluster first"
        return self.subnet.address(network.REDIS_LAST)

    def settings(self, **overrides: Any) -> Settings:
        """A producer's settings (in the root namespace): the cluster's Redis and S3, short
        heartbeats, values over 1 KiB through the store. Workers get these too, with
        their host's directories."""
        assert self.root is not None, "start the cluster first"
        fields: dict[str, Any] = {
            "redis_url": self.redis_url,
            "key_prefix": self.key_prefix,
            "heartbeat_interval_s": 0.5,
            "store_kind": "s3",
            "store_dir": self.root / "producer" / "store",
            "cache_dir": self.root / "producer" / "cache",
            "ram_dir": self.root / "producer" / "ram",
            "inline_max_bytes": 1024,
            "s3_endpoint_url": self.s3.url,
            "s3_bucket": self.s3.bucket,
            "s3_prefix": f"{self.key_prefix}/artifacts",
            "s3_access_key_id": self.s3.access_key_id,
            "s3_secret_access_key": self.s3.secret_access_key,
            "worker_id": f"{self.key_prefix}-producer",
            "transfer_max_retries": 2,
            "transfer_retry_backoff_max_s": 1.0,
            # Fault tests re-run the same plans: the content cache's own tests turn it on
            # per run (cache="on"), as tests/conftest.py does for one host.
            "content_cache": False,
            **overrides,
        }
        return Settings(**fields)

    # --- workers -------------------------------------------------------------------------

    def start_worker(
        self,
        host: str,
        *,
        name: str | None = None,
        tags: str = "",
        nodes: str = TEST_NODES,
        concurrency: int = 2,
        options: tuple[str, ...] = (),
        settings: Settings | None = None,
        wait: bool = True,
    ) -> HostWorker:
        """Start a worker on ``host`` (id ``<prefix>-<name or host>``), with ``settings``
        (default :meth:`settings`) on the host's own directories."""
        assert self.root is not None, "start the cluster first"
        worker_id = f"{self.key_prefix}-{name or host}"
        worker_settings = host_settings(settings or self.settings(), self.hosts[host], worker_id)
        worker = start_host_worker(
            self.hosts[host],
            worker_settings,
            self.root / "logs",
            tags=tags,
            nodes=nodes,
            concurrency=concurrency,
            options=options,
        )
        self.workers.append(worker)
        if wait:
            self.wait_live(worker)
        return worker

    def wait_live(self, worker: HostWorker, timeout_s: float = 60.0) -> None:
        wait_live(worker, self.settings(key_prefix=worker.settings.key_prefix), timeout_s)

    # --- faults --------------------------------------------------------------------------

    def cut(self, host: str) -> None:
        """Pull the host's cable: its link goes down, it reaches nothing and nothing reaches it."""
        network.set_link(self.hosts[host].link, up=False)

    def heal(self, host: str) -> None:
        network.set_link(self.hosts[host].link, up=True)

    def isolate(
        self,
        host: str,
        *,
        peers: bool = True,
        s3: bool = True,
        redis: bool = False,
        refuse: bool = False,
    ) -> None:
        """Cut the host off from its peers, the S3 server and/or Redis, the rest of the
        network untouched: packets are dropped silently both ways (connections hang until
        their timeouts), or with ``refuse`` the host's connections fail at once."""
        assert self.subnet is not None, "start the cluster first"
        target = self.hosts[host]
        addresses: list[str] = []
        if peers:
            addresses += [h.address for h in self.hosts.values() if h.name != host]
        if s3:
            addresses.append(self.subnet.address(network.S3_LAST))
        if redis:
            addresses.append(self.subnet.address(network.REDIS_LAST))
        if refuse:
            network.refuse_from(target.netns, addresses)
        else:
            network.drop_between(target.link, target.netns, addresses)

    def rejoin(self, host: str) -> None:
        """Undo :meth:`isolate`."""
        target = self.hosts[host]
        network.clear_drops(target.link, target.netns)

    def logs(self, workers: Iterable[HostWorker] | None = None, chars: int = 3000) -> str:
        """The tail of each worker's log, for an assertion message."""
        return "\n".join(
            f"--- {w.worker_id} on {w.host}:\n{w.log()[-chars:]}" for w in (workers or self.workers)
        )
