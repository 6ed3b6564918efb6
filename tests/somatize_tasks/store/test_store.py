"""The artifact store against real S3 (moto over HTTP) and real directories."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from boto3.exceptions import S3UploadFailedError
from botocore.exceptions import ClientError

from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import (
    ArtifactCorruptError,
    ArtifactIdError,
    ArtifactMissingError,
    StoreError,
    StoreUnavailableError,
)
from somatize_tasks.store import ArtifactRef, ArtifactStore, S3Store, artifact_key, shared
from somatize_tasks.store.shared import transient_error
from testkit.services import S3Endpoint, free_port


def run_id() -> str:
    return f"run-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def pair(settings: Settings) -> tuple[ArtifactStore, ArtifactStore]:
    """Two workers' stores sharing one bucket, each with its own cache."""
    return ArtifactStore(settings, "store-a"), ArtifactStore(settings, "store-b")


def test_put_upload_download_get_roundtrip(pair: tuple[ArtifactStore, ArtifactStore]) -> None:
    source, target = pair
    value = np.arange(50_000, dtype=np.float32).reshape(250, 200)
    ref = source.put(run_id(), "train", 2, value)
    assert (ref.codec, ref.inline, ref.worker_id, ref.iteration) == ("npy", None, "store-a", 2)
    assert not target.has_local(ref)
    assert source.upload(ref) == "s3"
    assert source.upload(ref) == "cached"
    target.download(ref)
    assert target.has_local(ref)
    got = target.get(ArtifactRef.model_validate_json(ref.model_dump_json()))
    assert got.dtype == value.dtype and np.array_equal(got, value)


def test_small_values_are_inline_and_never_uploaded(
    pair: tuple[ArtifactStore, ArtifactStore], s3_endpoint: S3Endpoint, settings: Settings
) -> None:
    source, target = pair
    ref = source.put(run_id(), "normalize", 0, {"mean": 1.5, "ids": [1, 2]})
    assert ref.codec == "json" and ref.inline is not None
    assert source.upload(ref) == "direct"
    assert target.get(ref) == {"mean": 1.5, "ids": [1, 2]}
    listing = s3_endpoint.client().list_objects_v2(  # type: ignore[attr-defined]
        Bucket=settings.s3_bucket, Prefix=f"{settings.s3_prefix}/{ref.run_id}"
    )
    assert listing["KeyCount"] == 0


def test_bytes_roundtrip_and_size_checked(pair: tuple[ArtifactStore, ArtifactStore]) -> None:
    source, target = pair
    ref = source.put(run_id(), "blob", 0, b"\x00\x01" * 4096)
    assert ref.codec == "bytes"
    source.upload(ref)
    assert target.get(ref) == b"\x00\x01" * 4096
    lying = ref.model_copy(update={"size": ref.size + 1})
    with pytest.raises(ArtifactCorruptError, match="its ref says"):
        source.get(lying)


def test_missing_artifact_is_a_clear_error(pair: tuple[ArtifactStore, ArtifactStore]) -> None:
    source, target = pair
    ref = source.put(run_id(), "never_uploaded", 0, b"x" * 5000)
    with pytest.raises(ArtifactMissingError, match="never_uploaded"):
        target.get(ref)


def test_delete_run_removes_cache_and_shared_copies(
    pair: tuple[ArtifactStore, ArtifactStore],
) -> None:
    source, target = pair
    ref = source.put(run_id(), "x", 0, b"y" * 5000)
    source.upload(ref)
    source.delete_run(ref.run_id)
    assert not source.has_local(ref)
    with pytest.raises(ArtifactMissingError):
        target.get(ref)


def test_multipart_upload_and_download(settings: Settings, tmp_path: Path) -> None:
    small_parts = settings.model_copy(
        update={
            "s3_multipart_threshold_bytes": 5 * 1024 * 1024,
            "s3_multipart_chunk_bytes": 5 * 1024 * 1024,
            "cache_dir": tmp_path,
            # A prefix of its own: moto dates every upload 2010, so the session's workers,
            # collecting, would take this one for abandoned and abort it mid-upload.
            "s3_prefix": f"{settings.s3_prefix}-multipart",
        }
    )
    source, target = ArtifactStore(small_parts, "mp-a"), ArtifactStore(small_parts, "mp-b")
    value = np.random.default_rng(0).standard_normal(2_000_000)  # 16 MB: 4 parts
    ref = source.put(run_id(), "big", 0, value)
    assert source.upload(ref) == "s3"
    assert np.array_equal(target.get(ref), value)


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("run_id", "../escape"),
        ("node_id", "a/b"),
        ("node_id", ".."),
        ("node_id", "nul\x00id"),
        ("node_id", "x" * 201),
        ("run_id", ""),
        ("node_id", "back\\slash"),
    ],
)
def test_ids_that_would_escape_are_rejected(
    pair: tuple[ArtifactStore, ArtifactStore], field: str, bad: str
) -> None:
    source, _ = pair
    ids = {"run_id": "run-ok", "node_id": "node_ok", field: bad}
    with pytest.raises(ArtifactIdError, match=field.replace("_", " ")):
        source.put(ids["run_id"], ids["node_id"], 0, 1)


def test_odd_but_harmless_ids_stay_inside_their_prefix(
    settings: Settings, s3_endpoint: S3Endpoint
) -> None:
    store = ArtifactStore(settings, "odd")
    ref = store.put(run_id(), "..%2F..%2Fetc ~ résumé", 0, b"z" * 5000)
    assert artifact_key(ref.run_id, ref.node_id, 0).count("/") == 2
    assert store.cache.path_for(ref.key).resolve().is_relative_to(store.cache.root.resolve())
    store.upload(ref)
    keys = [
        item["Key"]
        for item in s3_endpoint.client().list_objects_v2(  # type: ignore[attr-defined]
            Bucket=settings.s3_bucket, Prefix=f"{settings.s3_prefix}/{ref.run_id}/"
        )["Contents"]
    ]
    assert keys == [f"{settings.s3_prefix}/{ref.run_id}/..%252F..%252Fetc%20~%20r%C3%A9sum%C3%A9/0"]


def test_directory_store_works_without_s3(settings: Settings, tmp_path: Path) -> None:
    local = settings.model_copy(
        update={
            "store_kind": "local",
            "store_dir": tmp_path / "shared",
            "cache_dir": tmp_path / "cache",
        }
    )
    source, target = ArtifactStore(local, "dir-a"), ArtifactStore(local, "dir-b")
    ref = source.put(run_id(), "n", 0, list(range(1000)))
    assert source.upload(ref) == "cached"  # linked into the shared directory when written
    assert target.get(ref) == list(range(1000))


def test_on_one_machine_a_value_crosses_workers_without_a_copy(
    settings: Settings, tmp_path: Path
) -> None:
    """Without the RAM tier (or past its budget), by hard links on disk."""
    local = settings.model_copy(
        update={
            "store_kind": "local",
            "store_dir": tmp_path / "shared",
            "cache_dir": tmp_path / "cache",
            "ram_max_bytes": 0,
        }
    )
    source, target = ArtifactStore(local, "dir-a"), ArtifactStore(local, "dir-b")
    value = np.arange(200_000, dtype=np.float64)
    ref = source.put(run_id(), "big", 0, value)
    assert ref.inline is None
    read = target.get(ref)
    assert np.array_equal(read, value)
    assert isinstance(read, np.memmap) and not read.flags.writeable  # mapped, not copied
    files = [
        source.cache.path_for(ref.key),
        target.cache.path_for(ref.key),
        local.store_dir / ref.key,
    ]
    assert len({f.stat().st_ino for f in files}) == 1  # one file, three names


def test_a_small_value_travels_inline_and_touches_no_disk(
    settings: Settings, tmp_path: Path
) -> None:
    local = settings.model_copy(
        update={
            "store_kind": "local",
            "store_dir": tmp_path / "shared",
            "cache_dir": tmp_path / "cache",
        }
    )
    ref = ArtifactStore(local, "dir-a").put(run_id(), "tiny", 0, 1)
    assert ref.inline is not None
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


def test_unreachable_s3_names_endpoint_and_bucket_not_the_secret(settings: Settings) -> None:
    dead = settings.model_copy(update={"s3_endpoint_url": f"http://127.0.0.1:{free_port()}"})
    store = S3Store(dead)
    with pytest.raises(StoreUnavailableError) as caught:
        store.exists("r/n/0", 1)
    message = str(caught.value)
    assert dead.s3_endpoint_url in message and "somatize-test" in message  # type: ignore[operator]
    assert "testing-secret" not in message


def test_wrong_bucket_is_a_store_error(settings: Settings) -> None:
    store = S3Store(settings.model_copy(update={"s3_bucket": "no-such-bucket"}))
    with pytest.raises(StoreError, match="no-such-bucket"):
        store.upload(Path(__file__), "r/n/0")


def test_an_s3_hiccup_is_retried_and_a_refusal_is_not() -> None:
    """A transient S3 answer (or boto3's upload error wrapping one) is 'unavailable'
    (the transfer retries with backoff); a refusal such as AccessDenied is final."""

    def client_error(code: str) -> ClientError:
        return ClientError({"Error": {"Code": code, "Message": "m"}}, "UploadPart")

    def wrapped(code: str) -> S3UploadFailedError:
        exc = S3UploadFailedError("Failed to upload x to b/k")
        exc.__context__ = client_error(code)  # as boto3 raises it, inside its except
        return exc

    assert transient_error(client_error("RequestTimeout")) and transient_error(wrapped("503"))
    assert not transient_error(client_error("AccessDenied"))
    assert not transient_error(wrapped("NoSuchBucket"))
    assert not transient_error(S3UploadFailedError("no context"))


def test_stale_uploads_are_judged_on_the_s3_servers_clock(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reaper host two hours ahead must not abort uploads S3 began a moment ago:
    "now" is the reply's ``Date`` (moto stamps every upload in 2010, so the ages
    themselves cannot be tried here)."""
    store = S3Store(settings)
    reply = store.client.list_multipart_uploads(Bucket=store.bucket, Prefix="none/")
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 7200)
    assert abs(shared._server_now(reply) - real()) < 60
    assert shared._server_now({}) > real() + 7000  # no Date: this machine's clock
