"""Disk: a full disk is a clear error, and no partial file outlives its writer.

The full disk is real: a 2 MiB tmpfs mounted (as root, as CI runs) as a
worker's cache and as the producer's. Leftover temporary files and an
abandoned multipart upload (against moto's S3 server) are made the way a
killed worker leaves them, then swept.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from somatize_tasks.cli import main
from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import DiskFullError, NodeFailedError, StatesError
from somatize_tasks.runtime.producer.fitted_states import write_bundle
from somatize_tasks.runtime.producer.submit import submit_plan
from somatize_tasks.store.ram import RamTier
from testkit.services import S3Endpoint
from testkit.workers import WorkerFactory

TINY = "2m"
BIG_INPUT = list(range(400_000))  # about 2.6 MB as JSON: more than the disk holds


@pytest.fixture(scope="module")
def tiny_disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A 2 MiB tmpfs; skipped only where mounting is not allowed (not root)."""
    root = tmp_path_factory.mktemp("tiny-disk")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TINY}", "tmpfs", str(root)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


def _files(root: Path) -> list[str]:
    return [name for _, _, files in os.walk(root) for name in files]


@pytest.mark.parametrize(
    ("node_id", "params"),
    [("rt_make", {"n": 400_000}), ("rt_array", {"mb": 3})],
    ids=["json", "numpy"],  # NumPy's short write carries no errno: caught all the same
)
def test_a_full_disk_fails_the_node_naming_node_worker_tier_and_path(
    tiny_disk: Path,
    settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
    two_workers: Any,
    node_id: str,
    params: dict[str, Any],
) -> None:
    cache = tiny_disk / f"worker-cache-{node_id}"
    small = settings.model_copy(update={"cache_dir": cache})
    factory = WorkerFactory(small, tmp_path_factory.mktemp("disk-logs"))
    try:
        worker = factory.start(f"tinydisk{node_id[-1]}", tags="tinydisk")
        plan = {
            "Remote": {
                "node_id": "r",
                "target": {"Tag": "tinydisk"},
                "plan": {"Execute": {"node_id": node_id}},
            }
        }
        run = submit_plan(plan, params={node_id: params}, settings=settings, require_workers=True)
        with pytest.raises(NodeFailedError) as failed:
            run.wait(timeout=60)
        message = str(failed.value)
        assert "Remote traceback" not in message and "\n" not in message, message
        assert "DiskFullError: no space left on device" in message
        assert f"node '{node_id}'" in message and f"worker '{worker.worker_id}'" in message
        assert f"to the cache at {cache}" in message and "SOMATIZE_CACHE_DIR" in message
        assert _files(cache) == []  # the partial file went with the failure
    finally:
        factory.close()


def test_a_final_output_larger_than_the_store_names_the_store(
    tiny_disk: Path, settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A shared directory (one machine) on a small disk, the caches elsewhere: the
    run's output is written there as it is made, and does not fit."""
    root = tmp_path_factory.mktemp("roomy")
    local = settings.model_copy(
        update={
            "key_prefix": f"{settings.key_prefix}-fullstore",
            "store_kind": "local",
            "store_dir": tiny_disk / "store",
            "cache_dir": root / "cache",
            "ram_max_bytes": 0,
        }
    )
    factory = WorkerFactory(local, root)
    try:
        worker = factory.start("fullstore", tags="fullstore")
        plan = {
            "Remote": {
                "node_id": "rt_array",
                "target": {"Tag": "fullstore"},
                "plan": {"Execute": {"node_id": "rt_array"}},
            }
        }
        run = submit_plan(
            plan, params={"rt_array": {"mb": 3}}, settings=local, require_workers=True
        )
        with pytest.raises(NodeFailedError) as failed:
            run.wait(timeout=60)
        message = str(failed.value)
        assert "Remote traceback" not in message, message
        assert "no space left on device" in message and f"worker '{worker.worker_id}'" in message
        assert f"to the shared directory (the store) at {tiny_disk / 'store'}" in message, message
        assert "SOMATIZE_STORE_DIR" in message
        assert [n for n in _files(tiny_disk / "store") if n.endswith(".tmp")] == []
    finally:
        factory.close()


def test_a_full_ram_directory_sends_the_value_to_the_cache(tmp_path: Path) -> None:
    """NumPy's short write into a full tmpfs (no errno) is "full", like ENOSPC: the
    RAM tier gives the value up (nothing left behind) and the cache takes it."""
    tier = RamTier(tmp_path / "ram", 1 << 30)

    def short_write(fh: Any) -> None:
        fh.write(b"x" * 1000)
        raise OSError("524288 requested and 523248 written")

    assert tier.write("run/node/0", 1000, short_write) is None
    assert _files(tmp_path / "ram") == []

    def refused(fh: Any) -> None:
        raise PermissionError("Permission denied")

    with pytest.raises(PermissionError):  # any other error is not "full": it is raised
        tier.write("run/node/1", 10, refused)


def test_a_download_to_a_full_disk_fails_the_run_and_leaves_no_partial_file(
    tiny_disk: Path,
    settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
    two_workers: Any,
) -> None:
    cache = tiny_disk / "download-cache"
    factory = WorkerFactory(
        settings.model_copy(update={"cache_dir": cache}), tmp_path_factory.mktemp("disk-logs")
    )
    try:
        worker = factory.start("tinydl", tags="tinydl")
        plan = {
            "Sequence": [
                {
                    "Remote": {
                        "node_id": "r1",
                        "target": {"Tag": "cpu"},
                        "plan": {"Execute": {"node_id": "rt_make"}},
                    }
                },
                {
                    "Remote": {
                        "node_id": "r2",
                        "target": {"Tag": "tinydl"},
                        "plan": {"Execute": {"node_id": "rt_sum"}},
                    }
                },
            ]
        }
        run = submit_plan(
            plan, params={"rt_make": {"n": 400_000}}, settings=settings, require_workers=True
        )
        with pytest.raises(NodeFailedError) as failed:
            run.wait(timeout=60)
        message = str(failed.value).split("\n\nRemote traceback")[0]
        assert "no space left on device" in message, message
        assert f"worker '{worker.worker_id}'" in message and str(cache) in message
        assert _files(cache) == []  # boto3's and our temporary files both went
    finally:
        factory.close()


def test_a_full_disk_at_submit_is_a_clear_error(
    tiny_disk: Path, settings: Settings, two_workers: Any, tmp_path: Path
) -> None:
    producer = settings.model_copy(update={"cache_dir": tiny_disk / "producer-cache"})
    plan = {"Execute": {"node_id": "rt_sum"}}
    with pytest.raises(DiskFullError, match=r"no space left on device: .*node 'input'"):
        submit_plan(plan, input=BIG_INPUT, settings=producer, require_workers=True)
    assert _files(tiny_disk / "producer-cache") == []
    plan_file, input_file = tmp_path / "plan.json", tmp_path / "input.json"
    plan_file.write_text(json.dumps(plan))
    input_file.write_text(json.dumps(BIG_INPUT))
    result = CliRunner().invoke(
        main,
        ["submit", str(plan_file), "--input", str(input_file), "--require-workers"],
        env=producer.to_env(),
    )
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert result.output.startswith("Error: no space left on device"), result.output[:400]
    assert "Traceback" not in result.output


def _leave_partial(folder: Path, age_s: float) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f".0.{os.urandom(16).hex()}.tmp"
    path.write_bytes(b"half a value")
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_partial_files_are_swept_at_worker_start_and_by_gc(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> None:
    local = settings.model_copy(update={"cache_dir": tmp_path_factory.mktemp("sweep-cache")})
    factory = WorkerFactory(local, tmp_path_factory.mktemp("sweep-logs"))
    worker_dir = local.cache_dir / f"{settings.key_prefix}-sweeper"
    at_start = _leave_partial(worker_dir / "run1" / "node", age_s=0)
    try:
        factory.start("sweeper")
        assert not at_start.exists()  # a killed predecessor's, swept at once
    finally:
        factory.close()
    old = _leave_partial(worker_dir / "run2" / "node", age_s=3_600)
    young = _leave_partial(worker_dir / "run2" / "node", age_s=0)  # perhaps being written
    kept = worker_dir / "run2" / "node" / "0"
    kept.write_bytes(b"a finished value")
    result = CliRunner().invoke(main, ["gc"], env=local.to_env())
    assert result.exit_code == 0, result.output
    assert not old.exists() and young.exists() and kept.exists()
    # A shared directory (one machine) is swept the same way.
    shared = local.model_copy(
        update={"store_kind": "local", "store_dir": tmp_path_factory.mktemp("sweep-store")}
    )
    in_store = _leave_partial(shared.store_dir / "run3" / "node", age_s=3_600)
    result = CliRunner().invoke(main, ["gc", "--no-caches"], env=shared.to_env())
    assert "1 partial file(s) from the shared directory" in result.output, result.output
    assert not in_store.exists()


def test_gc_aborts_abandoned_multipart_uploads_under_the_prefix(
    settings: Settings, s3_endpoint: S3Endpoint
) -> None:
    # A prefix of its own: the session's workers abort uploads under theirs (moto dates
    # every upload 2010, so all look abandoned to them), which would race this test.
    settings = settings.model_copy(update={"s3_prefix": f"{settings.s3_prefix}-gc"})
    s3: Any = s3_endpoint.client()
    bucket = s3_endpoint.bucket
    ours = s3.create_multipart_upload(Bucket=bucket, Key=f"{settings.s3_prefix}/r/n/0")
    s3.upload_part(
        Bucket=bucket,
        Key=f"{settings.s3_prefix}/r/n/0",
        PartNumber=1,
        UploadId=ours["UploadId"],
        Body=b"x" * 1024,
    )
    theirs = s3.create_multipart_upload(Bucket=bucket, Key="someone-else/file")
    try:
        # moto dates every upload 2010-11-10: a grace of 10^9 s (31 years) makes it young.
        kept = _gc_uploads(settings, 1e9)
        assert "aborted 0 stale multipart upload(s)" in kept
        assert "aborted 1 stale multipart upload(s)" in _gc_uploads(settings, 0)
        left = {u["Key"] for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])}
        assert left == {"someone-else/file"}  # outside the project's prefix: not ours
    finally:
        s3.abort_multipart_upload(
            Bucket=bucket, Key="someone-else/file", UploadId=theirs["UploadId"]
        )


def _gc_uploads(settings: Settings, grace_s: float) -> str:
    result = CliRunner().invoke(
        main, ["gc", "--no-caches", "--uploads-older-than-s", str(grace_s)], env=settings.to_env()
    )
    assert result.exit_code == 0, result.output
    return str(result.output)


def test_a_states_file_on_a_full_disk_is_a_clear_error_and_no_half_file(tiny_disk: Path) -> None:
    target = tiny_disk / "states" / "fit.json"
    target.parent.mkdir()
    with pytest.raises(StatesError, match=r"cannot write states file .*No space left on device"):
        write_bundle(target, {"model": BIG_INPUT})
    assert _files(target.parent) == []
