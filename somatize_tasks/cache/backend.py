"""Small objects in the shared store: the content cache's records, pins and listings.

The artifact store moves values (files, multipart, hard links); the cache
also needs to read and write a few hundred bytes by key, delete one key and
list a prefix. :class:`CacheBackend` is that, over the same shared store the
settings name: the shared directory, or the S3 bucket under its prefix.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from botocore.exceptions import ClientError

from somatize_tasks.config.settings import Settings
from somatize_tasks.store import S3Store
from somatize_tasks.store.local import LocalDir

_TEMP = re.compile(r"^\..+\.tmp")


@dataclass(frozen=True)
class StoredObject:
    key: str
    size: int
    modified_at: float


class CacheBackend(Protocol):
    def describe(self) -> str: ...
    def read(self, key: str) -> bytes | None: ...
    def write(self, key: str, data: bytes) -> None: ...
    def delete(self, key: str) -> None: ...
    def listing(self, prefix: str) -> Iterator[StoredObject]: ...


class DirectoryBackend:
    """The shared directory (one machine)."""

    def __init__(self, root: Path) -> None:
        self.dir = LocalDir(root)

    def describe(self) -> str:
        return f"shared directory {self.dir.root}"

    def read(self, key: str) -> bytes | None:
        try:
            return self.dir.path_for(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def write(self, key: str, data: bytes) -> None:
        def put(fh: IO[bytes]) -> None:
            fh.write(data)

        self.dir.write(key, put)

    def delete(self, key: str) -> None:
        self.dir.path_for(key).unlink(missing_ok=True)

    def listing(self, prefix: str) -> Iterator[StoredObject]:
        top = self.dir.path_for(prefix.rstrip("/"))
        for folder, _, files in os.walk(top):
            for name in files:
                if _TEMP.match(name):
                    continue
                path = Path(folder, name)
                try:
                    stat = path.stat()
                except FileNotFoundError:
                    continue
                key = path.relative_to(self.dir.root).as_posix()
                yield StoredObject(key, stat.st_size, stat.st_mtime)


class S3Backend:
    """An S3-compatible bucket under the store's prefix."""

    def __init__(self, store: S3Store) -> None:
        self.store = store

    def describe(self) -> str:
        return self.store.describe()

    def read(self, key: str) -> bytes | None:
        with self.store.errors("reading", key):
            try:
                answer = self.store.client.get_object(
                    Bucket=self.store.bucket, Key=self.store.object_key(key)
                )
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                    return None
                raise
            body: Any = answer["Body"]
            return bytes(body.read())

    def write(self, key: str, data: bytes) -> None:
        with self.store.errors("writing", key):
            self.store.client.put_object(
                Bucket=self.store.bucket, Key=self.store.object_key(key), Body=data
            )

    def delete(self, key: str) -> None:
        with self.store.errors("deleting", key):
            self.store.client.delete_object(
                Bucket=self.store.bucket, Key=self.store.object_key(key)
            )

    def listing(self, prefix: str) -> Iterator[StoredObject]:
        skip = len(self.store.object_key(""))
        with self.store.errors("listing", prefix):
            pages = self.store.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.store.bucket, Prefix=self.store.object_key(prefix)
            )
            for page in pages:
                for item in page.get("Contents", []):
                    yield StoredObject(
                        item["Key"][skip:], int(item["Size"]), item["LastModified"].timestamp()
                    )


def cache_backend(settings: Settings) -> CacheBackend:
    """The backend over the shared store the settings name (``store_kind``)."""
    if settings.store_kind == "s3":
        return S3Backend(S3Store(settings))
    return DirectoryBackend(settings.store_dir)
