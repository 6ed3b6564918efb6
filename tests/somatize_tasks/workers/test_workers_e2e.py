"""Real worker processes: heartbeats, expiry, active_jobs, transfers, JSON-only messages."""

from __future__ import annotations

import pickle
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from somatize_tasks import create_app
from somatize_tasks.config.keys import TRANSFER_DOWNLOAD_TASK, TRANSFER_UPLOAD_TASK
from somatize_tasks.config.settings import Settings
from somatize_tasks.workers.registry import Registry
from testkit.nodes.worker_nodes import digest, make_array
from testkit.services import wait_for
from testkit.workers import WorkerFactory, WorkerProcess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def producer(settings: Settings) -> Celery:
    return create_app(settings)


@pytest.fixture(scope="module")
def registry(settings: Settings) -> Registry:
    return Registry.from_settings(settings)


def info_of(registry: Registry, worker_id: str) -> Any:
    for seen in registry.live():
        if seen.info.id == worker_id:
            return seen
    return None


def call(producer: Celery, name: str, queue: str, *args: Any, timeout_s: float = 30) -> Any:
    return producer.send_task(name, args=list(args), queue=queue).get(timeout=timeout_s)


def test_two_workers_advertise_their_options(
    two_workers: tuple[WorkerProcess, WorkerProcess], registry: Registry
) -> None:
    gpu, cpu = two_workers
    gpu_info = info_of(registry, gpu.worker_id).info
    cpu_info = info_of(registry, cpu.worker_id).info
    assert gpu_info.tags == ["gpu", "training"] and gpu_info.gpu is True
    assert cpu_info.tags == ["cpu"] and cpu_info.gpu is False
    assert gpu_info.max_concurrent == 2 and gpu_info.cpu_cores >= 1
    assert gpu_info.name == f"{gpu.worker_id}@{gpu_info.name.split('@', 1)[1]}"


def test_heartbeat_refreshes_within_one_interval(
    two_workers: tuple[WorkerProcess, WorkerProcess], registry: Registry, settings: Settings
) -> None:
    gpu, _ = two_workers
    ages = []
    deadline = time.monotonic() + 4 * settings.heartbeat_interval_s
    while time.monotonic() < deadline:
        ages.append(info_of(registry, gpu.worker_id).age_s)
        time.sleep(0.05)
    # Redis stamps ms; allow one poll of scheduling slack on a busy 2-core machine.
    assert max(ages) <= settings.heartbeat_interval_s + 0.25, ages


def test_sigkilled_worker_disappears_within_expiry(
    worker_factory: WorkerFactory, registry: Registry, settings: Settings
) -> None:
    doomed = worker_factory.start("doomed", tags="cpu", concurrency=1)
    assert info_of(registry, doomed.worker_id) is not None
    doomed.signal_group(signal.SIGKILL)
    killed_at = time.monotonic()
    assert wait_for(
        lambda: info_of(registry, doomed.worker_id) is None, settings.heartbeat_ttl_s + 1.0
    )
    assert time.monotonic() - killed_at <= settings.heartbeat_ttl_s + 0.5
    assert doomed.worker_id in [seen.info.id for seen in registry.dead()]


def test_clean_shutdown_deregisters_at_once(
    worker_factory: WorkerFactory, registry: Registry, settings: Settings
) -> None:
    leaving = worker_factory.start("leaving", concurrency=1)
    leaving.signal_group(signal.SIGTERM)
    leaving.proc.wait(20)
    # Gone without waiting for the expiry, and not counted as dead either.
    assert info_of(registry, leaving.worker_id) is None
    assert leaving.worker_id not in [seen.info.id for seen in registry.dead()]


def active_jobs(registry: Registry, worker_id: str) -> int:
    return int(info_of(registry, worker_id).info.active_jobs)


def test_active_jobs_counts_running_and_failed_node_tasks(
    two_workers: tuple[WorkerProcess, WorkerProcess], registry: Registry, producer: Celery
) -> None:
    _, cpu = two_workers
    assert active_jobs(registry, cpu.worker_id) == 0
    running = [
        producer.send_task("somatize.node.test_sleep", args=[1.5], queue=cpu.queue)
        for _ in range(2)
    ]
    assert wait_for(lambda: active_jobs(registry, cpu.worker_id) == 2, 5)
    assert [result.get(timeout=20) for result in running] == [1.5, 1.5]
    assert wait_for(lambda: active_jobs(registry, cpu.worker_id) == 0, 2)

    failing = producer.send_task("somatize.node.test_sleep", args=[1.0, True], queue=cpu.queue)
    assert wait_for(lambda: active_jobs(registry, cpu.worker_id) == 1, 5)
    with pytest.raises(RuntimeError, match="failed on purpose"):
        failing.get(timeout=20)
    assert wait_for(lambda: active_jobs(registry, cpu.worker_id) == 0, 2)

    shadowed = producer.send_task(
        "somatize.node.test_sleep", args=[1.0], queue=cpu.queue, shadow="node:test_sleep"
    )  # counted by task, not by shown name
    assert wait_for(lambda: active_jobs(registry, cpu.worker_id) == 1, 5)
    shadowed.get(timeout=20)
    assert wait_for(lambda: active_jobs(registry, cpu.worker_id) == 0, 2)

    plain = producer.send_task("somatize.test.sleep", args=[1.5], queue=cpu.queue)
    assert wait_for(lambda: plain.state == "STARTED", 10), "the plain task never started"
    time.sleep(0.3)  # more than the heartbeat's 50 ms poll: a count would show by now
    assert active_jobs(registry, cpu.worker_id) == 0  # not a node task
    plain.get(timeout=20)


def test_active_jobs_drops_when_a_node_is_revoked(
    two_workers: tuple[WorkerProcess, WorkerProcess], registry: Registry, producer: Celery
) -> None:
    _, cpu = two_workers
    long = producer.send_task("somatize.node.test_sleep", args=[60], queue=cpu.queue)
    assert wait_for(lambda: active_jobs(registry, cpu.worker_id) == 1, 5)
    long.revoke(terminate=True, signal="SIGKILL")
    assert wait_for(lambda: active_jobs(registry, cpu.worker_id) == 0, 5)
    assert wait_for(lambda: info_of(registry, cpu.worker_id) is not None, 5)


def test_value_transferred_between_workers_reads_back_identical(
    two_workers: tuple[WorkerProcess, WorkerProcess], producer: Celery
) -> None:
    gpu, cpu = two_workers
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    ref = call(producer, "somatize.test.put_array", gpu.queue, run_id, "normalize", 300_000, 7)
    assert ref["inline"] is None and ref["worker_id"] == gpu.worker_id

    uploaded = call(producer, TRANSFER_UPLOAD_TASK, gpu.queue, ref)
    assert uploaded == {
        "transfer_type": "s3",
        "bytes": ref["size"],
        "worker_id": gpu.worker_id,
        "key": f"{run_id}/normalize/0",
    }
    downloaded = call(producer, TRANSFER_DOWNLOAD_TASK, cpu.queue, ref)
    assert downloaded["transfer_type"] == "s3" and downloaded["bytes"] == ref["size"]

    seen = call(producer, "somatize.test.inspect", cpu.queue, ref)
    assert seen == {
        "had_local": True,
        "digest": digest(make_array(300_000, 7)),
        "worker_id": cpu.worker_id,
    }

    # Already in the shared store: the second upload skips the bytes.
    again = call(producer, TRANSFER_UPLOAD_TASK, gpu.queue, ref)
    assert again["transfer_type"] == "cached" and again["bytes"] == 0


def test_worker_reads_from_shared_store_when_its_cache_misses(
    two_workers: tuple[WorkerProcess, WorkerProcess], producer: Celery
) -> None:
    gpu, cpu = two_workers
    ref = call(
        producer,
        "somatize.test.put_array",
        cpu.queue,
        f"run-{uuid.uuid4().hex[:8]}",
        "train",
        5_000,
        3,
    )
    assert call(producer, TRANSFER_UPLOAD_TASK, cpu.queue, ref)["transfer_type"] == "s3"
    seen = call(producer, "somatize.test.inspect", gpu.queue, ref)
    assert seen["had_local"] is False and seen["digest"] == digest(make_array(5_000, 3))


def test_small_values_travel_direct(
    two_workers: tuple[WorkerProcess, WorkerProcess], producer: Celery
) -> None:
    gpu, cpu = two_workers
    ref = call(
        producer, "somatize.test.put_array", gpu.queue, f"run-{uuid.uuid4().hex[:8]}", "tiny", 4, 1
    )
    assert ref["inline"] is not None
    assert call(producer, TRANSFER_UPLOAD_TASK, gpu.queue, ref)["transfer_type"] == "direct"
    assert call(producer, TRANSFER_DOWNLOAD_TASK, cpu.queue, ref)["transfer_type"] == "direct"
    assert call(producer, "somatize.test.inspect", cpu.queue, ref)["digest"] == digest(
        make_array(4, 1)
    )


class _Payload:
    """Unpickling this creates ``path``: proof that a worker deserialised pickle."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.path,))


def test_pickle_message_is_refused(
    two_workers: tuple[WorkerProcess, WorkerProcess], producer: Celery, tmp_path: Path
) -> None:
    gpu, _ = two_workers
    probe = tmp_path / "probe"
    pickle.loads(pickle.dumps(_Payload(probe)))
    assert probe.exists(), "the payload must be live for this test to mean anything"

    marker = tmp_path / "deserialised"
    producer.send_task(
        "somatize.node.test_sleep", args=[_Payload(marker)], queue=gpu.queue, serializer="pickle"
    )
    assert wait_for(lambda: "ContentDisallowed" in gpu.log() or "refused" in gpu.log(), 10)
    assert not marker.exists()
    # The worker is still serving JSON messages.
    assert call(producer, "somatize.node.test_sleep", gpu.queue, 0.01) == 0.01


def test_plain_celery_worker_is_configured_from_the_environment(
    worker_factory: WorkerFactory, registry: Registry, producer: Celery
) -> None:
    plain = worker_factory.start("plain", tags="cpu,plain", concurrency=1, plain=True)
    seen = info_of(registry, plain.worker_id)
    assert seen.info.tags == ["cpu", "plain"] and seen.info.max_concurrent == 1
    assert seen.info.name.startswith(f"{plain.worker_id}@")
    assert call(producer, "somatize.node.test_sleep", plain.queue, 0.01) == 0.01
    queues = producer.control.inspect(destination=[seen.info.name], timeout=5).active_queues()
    assert [queue["name"] for queue in queues[seen.info.name]] == [plain.queue]
    plain.stop()
