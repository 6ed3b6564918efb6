"""Nothing unbounded: 200 runs on real workers leave nothing once their state expires.

A Redis of its own (so every key can be counted, Celery's included), a
short run TTL, and two workers whose runs always move a value through S3,
so every run writes into both workers' caches and the shared store.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from redis import Redis

from somatize_tasks.cli import main
from somatize_tasks.config.settings import Settings
from somatize_tasks.runtime.producer.submit import submit_plan
from testkit.plans import MAKE_SUM, ex, remote, seq
from testkit.services import S3Endpoint, start_redis_server, wait_for
from testkit.workers import WorkerFactory

pytestmark = pytest.mark.slow

RUNS = 200
WAVE = 20
RUN_TTL_S = 6
PLAN = seq(remote("cpu", ex("rt_make")), remote("gpu", ex("rt_sum")))


@pytest.fixture(scope="module")
def hygiene_settings(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Settings]:
    proc, port = start_redis_server()
    root = tmp_path_factory.mktemp("hygiene")
    try:
        yield settings.model_copy(
            update={
                "redis_url": f"redis://127.0.0.1:{port}/0",
                "key_prefix": f"{settings.key_prefix}-hy",
                "s3_prefix": f"{settings.key_prefix}/hygiene",
                "cache_dir": root / "cache",
                "store_dir": root / "store",
                "run_ttl_s": RUN_TTL_S,
                "gc_interval_s": 0.5,
                "worker_id": f"{settings.key_prefix}-hy-producer",
            }
        )
    finally:
        proc.kill()
        proc.wait()


def files_under(root: Path) -> int:
    """Files under ``root`` (os.walk: directories a sweeper deletes meanwhile are skipped)."""
    return sum(len(files) for _, _, files in os.walk(root))


def s3_objects(endpoint: S3Endpoint, prefix: str) -> int:
    listing = endpoint.client().list_objects_v2(Bucket=endpoint.bucket, Prefix=prefix)  # type: ignore[attr-defined]
    return int(listing.get("KeyCount", 0))


def test_two_hundred_runs_leave_nothing_after_their_state_expires(
    hygiene_settings: Settings, s3_endpoint: S3Endpoint, tmp_path: Path
) -> None:
    settings = hygiene_settings
    client = Redis.from_url(settings.redis_url)
    factory = WorkerFactory(settings, tmp_path)
    try:
        factory.start("cpu", tags="cpu")
        factory.start("gpu", tags="gpu")
        # Let the workers settle (kombu bindings, the reaper lease) before counting.
        warm = submit_plan(PLAN, settings=settings, require_workers=True)
        assert warm.wait(timeout=60) == MAKE_SUM
        worker_caches = [settings.cache_dir / w.worker_id for w in factory.started]
        assert wait_for(lambda: s3_objects(s3_endpoint, settings.s3_prefix) == 0, 60, 0.5)
        assert wait_for(lambda: sum(map(files_under, worker_caches)) == 0, 60, 0.5)
        assert CliRunner().invoke(main, ["gc"], env=settings.to_env()).exit_code == 0
        assert files_under(settings.cache_dir) == 0
        baseline = set(client.keys("*"))

        for start in range(0, RUNS, WAVE):
            runs = [
                submit_plan(PLAN, settings=settings, require_workers=True)
                for _ in range(min(WAVE, RUNS - start))
            ]
            assert [run.wait(timeout=120) for run in runs] == [MAKE_SUM] * len(runs)
        peak_keys, peak_files = client.dbsize(), files_under(settings.cache_dir)
        peak_objects = s3_objects(s3_endpoint, settings.s3_prefix)
        # Something to clean up: runs that ended more than RUN_TTL_S ago are already
        # being collected while later waves run (how many depends on the machine's
        # speed), so the files of at least the last wave are asked for, not all 200.
        assert peak_keys > len(baseline) + RUNS and peak_objects > 0 and peak_files > WAVE

        # The workers alone: the shared store, the runs index and their caches.
        assert wait_for(lambda: s3_objects(s3_endpoint, settings.s3_prefix) == 0, 90, 0.5)
        assert wait_for(lambda: sum(map(files_under, worker_caches)) == 0, 90, 0.5)
        assert wait_for(lambda: set(client.keys("*")) == baseline, 90, 0.5), sorted(
            set(client.keys("*")) - baseline
        )[:20]
        # The producer's own cache (no thread of its own here): `somatize-tasks gc`.
        result = CliRunner().invoke(main, ["gc"], env=settings.to_env())
        assert result.exit_code == 0, result.output
        assert files_under(settings.cache_dir) == 0
        print(
            f"\npeak: {peak_keys} keys, {peak_files} cache files, {peak_objects} S3 objects; "
            f"after expiry: {client.dbsize()} keys (baseline {len(baseline)}), 0 files"
        )
    finally:
        factory.close()
