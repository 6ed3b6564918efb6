"""The registry on a real Redis: freshness by Redis time, constant round trips, passwords."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from click.testing import CliRunner
from redis import Redis

from scheduler import WorkerInfo
from somatize_tasks import live_workers
from somatize_tasks.cli import main
from somatize_tasks.config.connections import redis_client
from somatize_tasks.config.keys import RedisKeys
from somatize_tasks.config.settings import Settings
from somatize_tasks.workers.registry import Registry
from testkit.services import start_redis_server


def worker(worker_id: str, **fields: Any) -> WorkerInfo:
    return WorkerInfo(id=worker_id, name=f"{worker_id}@test", **fields)


@pytest.fixture
def fresh(settings: Settings) -> Settings:
    """Settings with a prefix of their own, so other tests' workers do not show up."""
    prefix = f"{settings.key_prefix}:{uuid.uuid4().hex[:6]}"
    return settings.model_copy(update={"key_prefix": prefix})


class CountingRedis(Redis):  # type: ignore[type-arg]
    """Counts round trips: each command sent alone, and each pipeline."""

    calls = 0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        CountingRedis.calls += 1
        return super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)
        send = pipe.execute

        def execute(raise_on_error: bool = True) -> Any:
            CountingRedis.calls += 1
            return send(raise_on_error)

        pipe.execute = execute  # type: ignore[method-assign]
        return pipe


def test_live_workers_in_one_round_trip_however_many(fresh: Settings) -> None:
    client = CountingRedis.from_url(fresh.redis_url)
    registry = Registry(client, RedisKeys(fresh.key_prefix), fresh.heartbeat_ttl_s)
    registry.live()  # loads the script once
    for count in (1, 50, 1200):
        for index in range(len(registry.live()), count):
            registry.heartbeat(worker(f"w{index:04d}", tags=["cpu"], active_jobs=1))
        CountingRedis.calls = 0
        workers = live_workers(registry)
        assert CountingRedis.calls == 1
        assert len(workers) == count
    assert [info.id for info in workers[:2]] == ["w0000", "w0001"]
    assert workers[0].active_jobs == 1 and workers[0].tags == ["cpu"]


def test_a_stale_worker_vanishes_though_its_entry_lingers(fresh: Settings) -> None:
    # Sleeps only ever make entries older: "gone" is always past the TTL, and
    # "stays" keeps half a second of margin for a slow, shared machine.
    short = fresh.model_copy(update={"heartbeat_interval_s": 0.3, "heartbeat_ttl_s": 1.0})
    registry = Registry.from_settings(short)
    registry.heartbeat(worker("gone"))
    registry.heartbeat(worker("stays"))
    time.sleep(0.6)
    registry.heartbeat(worker("stays"))
    time.sleep(0.5)
    assert [info.id for info in live_workers(registry)] == ["stays"]
    assert [seen.info.id for seen in registry.dead()] == ["gone"]
    assert registry.client.hexists(registry.keys.workers_info, "gone")
    assert registry.deregister("gone") and not registry.deregister("gone")


def test_tag_filtered_reads_see_only_those_workers(fresh: Settings) -> None:
    registry = Registry.from_settings(fresh)
    for index in range(40):
        registry.heartbeat(worker(f"c{index:02d}", tags=["cpu"]))
    registry.heartbeat(worker("g1", tags=["gpu", "training"]))
    registry.heartbeat(worker("g0", tags=["gpu"]))
    assert [w.id for w in registry.live_infos(["gpu"])] == ["g0", "g1"]
    assert [w.id for w in registry.live_infos(["gpu", "training"])] == ["g0", "g1"]
    assert registry.live_infos([]) == [] and len(registry.live_infos()) == 42
    assert registry.client.hlen(registry.keys.worker_tag("gpu")) == 2
    registry.deregister("g1")
    assert [w.id for w in registry.live(["training"])] == []
    assert [w.id for w in registry.live_infos(["gpu"])] == ["g0"]


def test_an_unreadable_entry_hides_nothing_else(fresh: Settings) -> None:
    registry = Registry.from_settings(fresh)
    registry.heartbeat(worker("ok"))
    now = registry.heartbeat(worker("other"))
    registry.client.hset(registry.keys.workers_info, "old", '{"id": "old"}')
    registry.client.hset(registry.keys.workers_info, "bad", f'["bad"] {now:013d}')
    assert [w.id for w in registry.live_infos()] == ["ok", "other"]


def test_last_seen_is_reported(fresh: Settings) -> None:
    registry = Registry.from_settings(fresh)
    registry.heartbeat(worker("w"))
    (seen,) = registry.live()
    assert 0 <= seen.age_s < 1 and abs(seen.last_seen.timestamp() - time.time()) < 5


def test_password_protected_redis_works() -> None:
    proc, port = start_redis_server("--requirepass", "s3cret-pw")
    try:
        settings = Settings(redis_url=f"redis://:s3cret-pw@127.0.0.1:{port}/0")
        registry = Registry.from_settings(settings)
        registry.heartbeat(worker("locked"))
        assert [info.id for info in live_workers(settings)] == ["locked"]
        wrong = Settings(redis_url=f"redis://:wrong@127.0.0.1:{port}/0")
        with pytest.raises(Exception, match=r"(?i)invalid|auth|WRONGPASS"):
            redis_client(wrong).ping()
    finally:
        proc.kill()
        proc.wait()


def test_workers_cli_prints_table_and_json(fresh: Settings) -> None:
    Registry.from_settings(fresh).heartbeat(
        worker("gpu-a", tags=["gpu"], gpu=True, active_jobs=1, max_concurrent=4)
    )
    env = fresh.to_env()
    runner = CliRunner()
    as_json = runner.invoke(main, ["workers", "--json"], env=env)
    assert as_json.exit_code == 0, as_json.output
    (listed,) = json.loads(as_json.output)
    assert listed == {
        "id": "gpu-a",
        "name": "gpu-a@test",
        "tags": ["gpu"],
        "gpu": True,
        "cpu_cores": 1,
        "active_jobs": 1,
        "max_concurrent": 4,
    }
    table = runner.invoke(main, ["workers"], env={**env, "COLUMNS": "160"})
    assert table.exit_code == 0
    assert "gpu-a" in table.output and "1/4" in table.output and "s ago" in table.output


def test_workers_cli_names_unreachable_redis_without_password() -> None:
    env = {"SOMATIZE_REDIS_URL": "redis://:pw-xyz@127.0.0.1:1/0"}
    result = CliRunner().invoke(main, ["workers"], env=env)
    assert result.exit_code == 1
    assert "127.0.0.1:1" in result.output and "pw-xyz" not in result.output
