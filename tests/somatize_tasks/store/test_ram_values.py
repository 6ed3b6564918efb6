"""A large value crossing real workers through the RAM tier, its fallback and its cleanup.

Two worker processes on a shared directory with a RAM directory of their own
(in /dev/shm where there is one) and a 1.5 MiB budget: a 1 MiB NumPy array
made on one worker is read on the other from RAM (memory-mapped, no disk
file anywhere); the next one is over the budget and takes the disk path;
and collecting the runs (their state expired) removes both.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from somatize_tasks.config.keys import RedisKeys
from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import RunStateLostError, RunStillRunningError
from somatize_tasks.runtime.producer.handle import PlanRun
from somatize_tasks.runtime.producer.submit import submit_plan
from somatize_tasks.store import key_part, shared_store
from somatize_tasks.store.gc import CacheSweeper, RunCollector
from somatize_tasks.store.spares import SPARE_DIR
from testkit.workers import TEST_NODES, WorkerFactory
from tests.conftest import needs_leases
from tests.somatize_tasks.cli.test_cli_runs import cli

MIB = 1 << 20


@pytest.fixture(scope="module")
def ram_cluster(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Settings, str, str]]:
    root = tmp_path_factory.mktemp("ram")
    shm = Path("/dev/shm")
    ram_dir = shm / f"somatize-test-{uuid.uuid4().hex[:8]}" if shm.is_dir() else root / "ram"
    local = settings.model_copy(
        update={
            "key_prefix": f"{settings.key_prefix}-ram",
            "store_kind": "local",
            "store_dir": root / "store",
            "cache_dir": root / "cache",
            "ram_dir": ram_dir,
            "ram_max_bytes": 3 * MIB // 2,
            "worker_id": f"{settings.key_prefix}-ram-producer",
        }
    )
    factory = WorkerFactory(local, root)
    try:
        nodes = f"{TEST_NODES},testkit.nodes.peer_nodes"
        a = factory.start("ra", tags="ra", nodes=nodes, wait=False)
        b = factory.start("rb", tags="rb", nodes=nodes, wait=False)
        factory.wait_live(a)
        factory.wait_live(b)
        yield local, a.worker_id, b.worker_id
    finally:
        factory.close()
        shutil.rmtree(ram_dir, ignore_errors=True)


def across(a: str, b: str) -> dict[str, Any]:
    def on(worker: str, node_id: str) -> dict[str, Any]:
        plan = {"Execute": {"node_id": node_id}}
        return {"Remote": {"node_id": node_id, "target": {"WorkerId": worker}, "plan": plan}}

    return {"Sequence": [on(a, "peer_make"), on(b, "peer_size")]}


def ram_of(local: Settings) -> Path:
    return local.ram_dir / key_part("key prefix", local.key_prefix)


def made_across(local: Settings, a: str, b: str, n_bytes: int) -> PlanRun:
    """A finished run whose array of ``n_bytes`` was made on ``a`` and read on ``b``."""
    params = {"peer_make": {"n_bytes": n_bytes}}
    run = submit_plan(across(a, b), params=params, settings=local, require_workers=True)
    assert run.wait(timeout=60) == n_bytes
    return run


def files(root: Path, run_id: str) -> list[Path]:
    where = root / key_part("run id", run_id)
    return [p for p in where.rglob("*") if p.is_file()] if where.exists() else []


def expire(settings: Settings, run_id: str) -> None:
    """What the run's TTL does: its state leaves Redis."""
    Redis.from_url(settings.redis_url).delete(RedisKeys(settings.key_prefix).run(run_id))


def test_a_value_crosses_workers_in_ram_falls_back_over_budget_and_goes_with_its_run(
    ram_cluster: tuple[Settings, str, str],
) -> None:
    local, a, b = ram_cluster
    ram = ram_of(local)
    first = made_across(local, a, b, MIB)  # read on b, memory-mapped from RAM
    assert [p.name for p in files(ram, first.id)] == [
        "0.1"
    ]  # pass 0, attempt 1 (fencing: each attempt its own key)
    disk = [local.store_dir, local.cache_dir / a, local.cache_dir / b]
    assert not any(files(root, first.id) for root in disk)  # nothing on disk

    time.sleep(1.1)  # the workers recount the tier's size at most once a second
    second = made_across(local, a, b, MIB)
    assert files(ram, second.id) == []  # 1 + 1 MiB is over the 1.5 MiB budget
    assert len(files(local.store_dir, second.id)) == 1  # so it took the disk path

    for run in (first, second):
        expire(local, run.id)
    client = Redis.from_url(local.redis_url)
    keys = RedisKeys(local.key_prefix)
    collected = RunCollector(client, keys, lambda: shared_store(local), 0).collect()
    assert {first.id, second.id} <= set(collected)
    assert files(ram, first.id) == [] and files(local.store_dir, second.id) == []

    # A run whose collector ran on another machine: the workers' sweep clears RAM too.
    time.sleep(1.1)  # (the workers see the room the collection made at their next recount)
    third = made_across(local, a, b, MIB)
    assert len(files(ram, third.id)) == 1
    expire(local, third.id)
    sweeper = CacheSweeper(client, keys, local.cache_dir / "nobody", 0, 0, ram_roots=[ram])
    assert sweeper.sweep() >= 1
    assert files(ram, third.id) == []


def run_keys_left(settings: Settings, run_id: str) -> list[bytes]:
    client = Redis.from_url(settings.redis_url)
    return list(client.scan_iter(match=RedisKeys(settings.key_prefix).run(run_id) + "*"))


def index_score(settings: Settings, run_id: str) -> float | None:
    """The run's date in the runs index, which the run collector goes by."""
    keys = RedisKeys(settings.key_prefix)
    return Redis.from_url(settings.redis_url).zscore(keys.runs, run_id)


def test_forget_deletes_an_ended_runs_state_and_values_everywhere_at_once(
    ram_cluster: tuple[Settings, str, str],
) -> None:
    local, a, b = ram_cluster
    ram = ram_of(local)
    time.sleep(1.1)  # the workers recount the tier's size at most once a second
    in_ram = made_across(local, a, b, MIB)
    time.sleep(1.1)
    on_disk = made_across(local, a, b, MIB)
    assert len(files(ram, in_ram.id)) == 1
    assert files(local.store_dir, on_disk.id) and files(local.cache_dir / a, on_disk.id)
    held = in_ram.result("peer_make")  # memory-mapped from the RAM file
    assert run_keys_left(local, in_ram.id)

    forgotten_at = time.time()
    assert in_ram.forget() is True
    assert cli("forget", on_disk.id, settings=local).stdout.strip() == (
        f"run {on_disk.id} forgotten: its state and values are deleted"
    )
    for run in (in_ram, on_disk):
        assert run_keys_left(local, run.id) == []
        assert (index_score(local, run.id) or 0) >= forgotten_at  # collected again a TTL on
        for root in (ram, local.store_dir, local.cache_dir / a, local.cache_dir / b):
            assert files(root, run.id) == [], root
    assert int(held.sum()) == MIB  # what was read stays valid: the file was unlinked
    assert not (ram / SPARE_DIR).exists()  # (not recycled: the producer had it mapped)

    assert in_ram.forget() is False
    with pytest.raises(RunStateLostError, match="forgotten"):
        in_ram.wait(timeout=5)
    with pytest.raises(RunStateLostError, match="forgotten"):
        PlanRun.attach(in_ram.id, local)
    gone = cli("forget", in_ram.id, settings=local)
    assert gone.returncode == 0 and "not known to Redis" in gone.stdout


def test_forget_refuses_a_running_run_and_says_how_to_end_it(
    ram_cluster: tuple[Settings, str, str],
) -> None:
    local, a, _ = ram_cluster
    plan = {
        "Remote": {
            "node_id": "rt_sleep",
            "target": {"WorkerId": a},  # 5 s: the CLI starts
            "plan": {"Execute": {"node_id": "rt_sleep"}},
        }
    }
    run = submit_plan(
        plan, input=7, params={"rt_sleep": {"s": 5.0}}, settings=local, require_workers=True
    )
    with pytest.raises(RunStillRunningError, match=rf"run {run.id} is still running.*cancel"):
        run.forget()
    refused = cli("forget", run.id, settings=local)
    assert refused.returncode == 1 and "still running" in refused.stderr
    assert run.wait(timeout=60) == 7  # the refusal changed nothing
    assert run.forget() is True


@needs_leases
def test_the_next_value_reuses_the_ram_file_of_a_forgotten_run(
    ram_cluster: tuple[Settings, str, str],
) -> None:
    local, a, b = ram_cluster
    ram = ram_of(local)
    time.sleep(1.1)  # the workers recount the tier's size at most once a second
    first = made_across(local, a, b, 300_000)  # spares may hold a quarter of 1.5 MiB
    (path,) = files(ram, first.id)
    inode = path.stat().st_ino
    assert first.forget()
    assert [spare.stat().st_ino for spare in (ram / SPARE_DIR).iterdir()] == [inode]

    second = made_across(local, a, b, 250_000)  # read on b from the recycled file
    (path,) = files(ram, second.id)
    assert path.stat().st_ino == inode and list((ram / SPARE_DIR).iterdir()) == []
    assert int(second.result("peer_make").sum()) == 250_000
    assert second.forget()
