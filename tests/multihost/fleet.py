"""The multi-host tests' workers: one per host, replaced when a test kills one."""

from __future__ import annotations

from somatize_tasks.config.settings import Settings
from somatize_tasks.workers.registry import Registry
from testkit.hosts import HostCluster, HostWorker
from testkit.services import wait_for
from testkit.workers import TEST_NODES

HOSTS = ("a", "b", "c")
NODES = f"{TEST_NODES},testkit.nodes.host_nodes"
TAGS = {"a": "cpu,on-a", "b": "cpu,on-b,spare", "c": "cpu,on-c,spare"}


class HostWorkers:
    """The live worker of each host; :meth:`restore` replaces dead ones."""

    def __init__(self, cluster: HostCluster, settings: Settings) -> None:
        self.cluster, self.settings = cluster, settings
        self.by_host: dict[str, HostWorker] = {}
        self.generation = 0

    def __getitem__(self, host: str) -> HostWorker:
        return self.by_host[host]

    def host_of(self, worker_id: str | None) -> str | None:
        return next((h for h, w in self.by_host.items() if w.worker_id == worker_id), None)

    def start(self, hosts: tuple[str, ...]) -> None:
        self.generation += 1
        suffix = "" if self.generation == 1 else str(self.generation)
        started = [
            self.cluster.start_worker(
                host,
                name=f"{host}{suffix}",
                tags=TAGS[host],
                nodes=NODES,
                settings=self.settings,
                wait=False,
            )
            for host in hosts
        ]
        for worker in started:
            self.cluster.wait_live(worker)
            self.by_host[worker.host] = worker

    def live(self, host: str) -> bool:
        """Whether ``host``'s worker heartbeats now."""
        worker = self.by_host[host]
        registry = Registry.from_settings(self.settings)
        return worker.proc.poll() is None and any(
            seen.info.id == worker.worker_id for seen in registry.live()
        )

    def restore(self, back_within_s: float = 30.0) -> None:
        """Heal and rejoin every link; a host whose worker died gets a new one. A worker
        that lives but does not heartbeat again within ``back_within_s`` of the heal is
        replaced too, and reported (an assertion error): surviving a partition is its job."""
        for host in HOSTS:
            self.cluster.heal(host)
            self.cluster.rejoin(host)
        dead = [h for h, w in self.by_host.items() if w.proc.poll() is not None]
        stuck = [
            h
            for h in HOSTS
            if h not in dead and not wait_for(lambda h=h: self.live(h), back_within_s)
        ]
        for host in dead + stuck:
            self.by_host[host].stop(timeout_s=1.0)
        if dead or stuck:
            self.start(tuple(dead + stuck))
        assert not stuck, f"workers never heartbeat again after the heal: {stuck}\n" + "\n".join(
            self.by_host[h].log()[-3000:] for h in stuck
        )
