"""The shared store every worker can reach: S3-compatible, or a directory on one machine.

Both speak the same small protocol (:class:`SharedStore`); keys come from
:func:`~somatize_tasks.store.ids.artifact_key` and are placed under the
configured prefix. S3 transfers go through boto3's transfer manager, so
large values move as streamed multipart uploads and ranged downloads; an
object only becomes visible once its single PUT or its multipart upload
completes. Errors name the endpoint and bucket, never the credentials.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator, Mapping
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import (
    ArtifactCorruptError,
    ArtifactMissingError,
    ConfigError,
    StoreError,
    StoreUnavailableError,
)
from somatize_tasks.store.local import LocalDir
from somatize_tasks.store.ram import RamTier, ram_tier

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

_UNREACHABLE = (
    EndpointConnectionError,
    ConnectTimeoutError,
    ReadTimeoutError,
    ConnectionClosedError,
)


#: S3 error codes that say "not now" rather than "never": retried like an unreachable endpoint.
_TRANSIENT_CODES = frozenset(
    {
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "SlowDown",
        "ServiceUnavailable",
        "InternalError",
        "500",
        "502",
        "503",
        "504",
    }
)


def transient_error(exc: BaseException | None) -> bool:
    """Whether a boto error (or what it wraps: boto3's S3UploadFailedError keeps the
    ClientError as its context) is a passing outage of the endpoint."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, _UNREACHABLE):
            return True
        if isinstance(exc, ClientError):
            return exc.response.get("Error", {}).get("Code") in _TRANSIENT_CODES
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _not_found(exc: ClientError) -> bool:
    return exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound")


class SharedStore(Protocol):
    """What the artifact store needs from a shared backend."""

    def describe(self) -> str: ...
    def exists(self, key: str, size: int) -> bool: ...
    def upload(self, source: Path, key: str) -> None: ...
    def download(self, key: str, dest: LocalDir, size: int) -> None: ...
    def delete_prefix(self, prefix: str) -> None: ...


class DirectoryStore:
    """A shared directory: every worker on this machine sees the same files.

    Values move in and out by hard link where the caches are on the same file
    system, so a value crosses workers on one machine without a copy. The
    machine's RAM tier (``ram``) is part of it: a value there is shared too.
    """

    def __init__(self, root: Path, ram: RamTier | None = None) -> None:
        self.dir = LocalDir(root)
        self.ram = ram

    def describe(self) -> str:
        return f"shared directory {self.dir.root}"

    def exists(self, key: str, size: int) -> bool:
        return self.dir.has(key, size) or (self.ram is not None and self.ram.dir.has(key, size))

    def upload(self, source: Path, key: str) -> None:
        self.dir.link_in(source, key)

    def download(self, key: str, dest: LocalDir, size: int) -> None:
        held = self.ram.path(key, size) if self.ram is not None else None
        dest.link_in(held or self.dir.checked_path(key, size, self.describe()), key)

    def delete_prefix(self, prefix: str) -> None:
        self.dir.delete_prefix(prefix)
        if self.ram is not None:
            self.ram.delete_prefix(prefix)


class S3Store:
    """An S3-compatible bucket (AWS S3, MinIO, moto) under ``s3_prefix``."""

    def __init__(self, settings: Settings) -> None:
        if not settings.s3_bucket:
            raise ConfigError("SOMATIZE_S3_BUCKET must be set when SOMATIZE_STORE_KIND is 's3'")
        self.bucket = settings.s3_bucket
        self.prefix = settings.s3_prefix
        self.endpoint = settings.s3_endpoint_url or f"AWS S3 ({settings.s3_region})"
        secret = settings.s3_secret_access_key
        self.client: S3Client = boto3.session.Session().client(
            "s3",
            endpoint_url=settings.s3_endpoint_url,
            region_name=settings.s3_region,
            aws_access_key_id=settings.s3_access_key_id,
            aws_secret_access_key=secret.get_secret_value() if secret else None,
            config=Config(
                retries={"max_attempts": 3, "mode": "standard"},
                connect_timeout=5,
                read_timeout=60,
                max_pool_connections=max(10, settings.s3_max_concurrency * 2),
            ),
        )
        # Uploads in parts of s3_multipart_chunk_bytes; downloads in fewer, larger
        # ranged GETs (s3_download_chunk_bytes). bench/bench_transfer.py compares both
        # with bare boto3 on the same bytes.
        self.upload_config = TransferConfig(
            multipart_threshold=settings.s3_multipart_threshold_bytes,
            multipart_chunksize=settings.s3_multipart_chunk_bytes,
            max_concurrency=settings.s3_max_concurrency,
        )
        self.download_config = TransferConfig(
            multipart_threshold=settings.s3_multipart_threshold_bytes,
            multipart_chunksize=settings.s3_download_chunk_bytes,
            max_concurrency=settings.s3_max_concurrency,
        )

    def describe(self) -> str:
        return f"S3 bucket '{self.bucket}' at {self.endpoint}"

    def object_key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    @contextlib.contextmanager
    def _errors(self, action: str, key: str) -> Iterator[None]:
        """Turn boto errors into store errors that name endpoint and bucket only."""
        where = f"{action} '{self.object_key(key)}' in {self.describe()}"
        try:
            yield
        except _UNREACHABLE as exc:
            raise StoreUnavailableError(f"{where}: cannot reach the endpoint ({exc})") from None
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code, message = error.get("Code", "?"), error.get("Message", "")
            kind = StoreUnavailableError if transient_error(exc) else StoreError
            raise kind(f"{where}: {code} {message}".rstrip()) from None
        except (BotoCoreError, boto3.exceptions.Boto3Error) as exc:
            kind = StoreUnavailableError if transient_error(exc) else StoreError
            raise kind(f"{where}: {exc}") from None

    #: The same, for other modules that talk to the bucket (the content cache's records).
    errors = _errors

    def exists(self, key: str, size: int) -> bool:
        with self._errors("looking up", key):
            try:
                head = self.client.head_object(Bucket=self.bucket, Key=self.object_key(key))
            except ClientError as exc:
                if _not_found(exc):
                    return False
                raise
        return int(head["ContentLength"]) == size

    def upload(self, source: Path, key: str) -> None:
        with self._errors("uploading", key):
            self.client.upload_file(
                str(source), self.bucket, self.object_key(key), Config=self.upload_config
            )

    def download(self, key: str, dest: LocalDir, size: int) -> None:
        final = dest.path_for(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        temp = final.with_name(f".{final.name}.{uuid.uuid4().hex}.tmp")
        try:
            with self._errors("downloading", key):
                try:
                    self.client.download_file(
                        self.bucket, self.object_key(key), str(temp), Config=self.upload_config
                    )
                except ClientError as exc:
                    if _not_found(exc):
                        raise ArtifactMissingError(
                            f"artifact '{key}' is not in {self.describe()}"
                        ) from None
                    raise
            actual = temp.stat().st_size
            if actual != size:
                raise ArtifactCorruptError(
                    f"artifact '{key}' in {self.describe()} has {actual} bytes; its ref says {size}"
                )
            os.replace(temp, final)
        finally:
            temp.unlink(missing_ok=True)

    def abort_stale_uploads(self, grace_s: float) -> int:
        """Abort multipart uploads under this store's prefix started more than
        ``grace_s`` seconds ago (left by a worker killed mid-upload); how many."""
        prefix = f"{self.prefix}/" if self.prefix else ""
        aborted = 0
        with self._errors("aborting stale uploads under", prefix or "/"):
            pages = self.client.get_paginator("list_multipart_uploads").paginate(
                Bucket=self.bucket, Prefix=prefix
            )
            for page in pages:
                cutoff = _server_now(page) - grace_s  # S3 stamped them: judged on its clock
                for upload in page.get("Uploads", []):
                    if upload["Initiated"].timestamp() >= cutoff:
                        continue
                    with contextlib.suppress(ClientError):  # finished or aborted meanwhile
                        self.client.abort_multipart_upload(
                            Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                        )
                        aborted += 1
        return aborted

    def delete_prefix(self, prefix: str) -> None:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.object_key(prefix)
        )
        with self._errors("deleting", prefix):
            for page in pages:
                objects: list[Any] = [{"Key": item["Key"]} for item in page.get("Contents", [])]
                if objects:
                    self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": objects})


def shared_store(settings: Settings) -> SharedStore:
    """The shared store the settings name (``store_kind``)."""
    if settings.store_kind == "s3":
        return S3Store(settings)
    return DirectoryStore(settings.store_dir, ram_tier(settings))


def _server_now(reply: Mapping[str, Any]) -> float:
    """The time an S3 reply was made, from its ``Date`` header (the server's clock,
    which stamped the uploads it lists); this machine's clock when there is none."""
    date = reply.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    try:
        return parsedate_to_datetime(date).timestamp() if date else time.time()
    except (TypeError, ValueError):
        return time.time()
