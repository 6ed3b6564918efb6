"""A block waiting for its transfers is orphaned when no step of its chains is left
anywhere (no worker holds one, no queue has one), and only then."""

from __future__ import annotations

import time
import uuid
from typing import Any

from redis import Redis

from scheduler import WorkerInfo
from somatize_tasks.config.keys import RedisKeys, queue_name
from somatize_tasks.runtime.recovery.orphans import OrphanWatch
from somatize_tasks.workers.registry import Registry

TTL_S = 0.2


class Cluster:
    """Two workers (``src``, ``dst``) with unique ids, reporting what they hold."""

    def __init__(self, redis_url: str, held: dict[str, tuple[str, ...] | None]) -> None:
        tag = uuid.uuid4().hex[:6]
        self.src, self.dst = f"oc-src-{tag}", f"oc-dst-{tag}"
        self.client: Redis[bytes] = Redis.from_url(redis_url)
        registry = Registry(self.client, RedisKeys(f"oc{tag}"), ttl_s=10)
        for name, tasks in held.items():
            worker = getattr(self, name)
            registry.heartbeat(
                WorkerInfo(id=worker, name=worker, cpu_cores=2, max_concurrent=2), tasks=tasks
            )
        self.watch = OrphanWatch(registry, self.client, TTL_S)

    def waiting(self, chain: list[list[str]]) -> dict[str, Any]:
        """Node ``b``'s status: pending on ``dst``, waiting for the ``chain``'s steps."""
        return {
            "state": "pending",
            "worker": self.dst,
            "block": 3,
            "epoch": 0,
            "task_id": "node-t",
            "queued_at": time.time() - 5,
            "waiting_for": "transfers",
            "chain": chain,
        }

    def judge(self, status: dict[str, Any]) -> list[str]:
        """Two sweeps one TTL apart (a suspect must be seen missing twice)."""
        live = {self.src, self.dst}
        self.watch.new_sweep()
        first = self.watch.orphaned("run1", {"b": status}, live)
        time.sleep(TTL_S * 1.5)
        self.watch.new_sweep()
        return first + self.watch.orphaned("run1", {"b": status}, live)


def ids(*names: str) -> list[str]:
    return [f"{name}-{uuid.uuid4()}" for name in names]


def test_a_chain_with_no_step_left_anywhere_is_orphaned(redis_url: str) -> None:
    c = Cluster(redis_url, {"src": (), "dst": ()})
    up, down, ready = ids("up", "down", "ready")
    assert c.judge(c.waiting([[c.src, up], [c.dst, down], [c.dst, ready]])) == ["b"]


def test_a_step_held_by_its_worker_keeps_the_block_waiting(redis_url: str) -> None:
    down, ready = ids("down", "ready")
    c = Cluster(redis_url, {"src": (), "dst": (ready,)})
    assert c.judge(c.waiting([[c.dst, down], [c.dst, ready]])) == []


def test_a_step_in_its_workers_queue_keeps_the_block_waiting(redis_url: str) -> None:
    down, ready = ids("down", "ready")
    c = Cluster(redis_url, {"src": (), "dst": ()})
    queue = queue_name(c.dst)
    c.client.lpush(queue, f'{{"headers": {{"id": "{down}"}}}}')
    try:
        assert c.judge(c.waiting([[c.dst, down], [c.dst, ready]])) == []
    finally:
        c.client.delete(queue)


def test_a_worker_without_a_report_is_never_judged(redis_url: str) -> None:
    up, down = ids("up", "down")
    c = Cluster(redis_url, {"src": None, "dst": ()})
    assert c.judge(c.waiting([[c.src, up], [c.dst, down]])) == []
