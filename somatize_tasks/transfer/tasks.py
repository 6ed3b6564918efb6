"""Celery tasks that move artifacts: thin wrappers over :mod:`somatize_tasks.transfer`.

``somatize.transfer.upload`` is published to the source worker's queue,
``somatize.transfer.download`` to the target worker's. Each takes the
artifact ref as a dict and returns a small dict
(``{"transfer_type": "s3" | "cached" | "direct", "bytes": N, ...}``).
An unreachable store is retried with bounded exponential backoff
(``transfer_max_retries``, ``transfer_retry_backoff_max_s``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Task, shared_task

from somatize_tasks.config.keys import TRANSFER_DOWNLOAD_TASK, TRANSFER_UPLOAD_TASK
from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import StoreUnavailableError
from somatize_tasks.messaging.celery_app import settings_of
from somatize_tasks.store import ArtifactRef, ArtifactStore
from somatize_tasks.transfer import download_artifact, store_for, upload_artifact


def backoff_s(retries: int, settings: Settings) -> float:
    """1, 2, 4, ... seconds, capped at ``transfer_retry_backoff_max_s``."""
    return float(min(settings.transfer_retry_backoff_max_s, 2.0**retries))


def _run(
    task: Task[Any, Any],
    ref: dict[str, Any],
    action: Callable[[ArtifactStore, ArtifactRef], dict[str, Any]],
) -> dict[str, Any]:
    settings = settings_of(task.app)
    try:
        return action(store_for(settings), ArtifactRef.model_validate(ref))
    except StoreUnavailableError as exc:
        raise task.retry(
            exc=exc,
            countdown=backoff_s(task.request.retries, settings),
            max_retries=settings.transfer_max_retries,
        ) from None


@shared_task(bind=True, name=TRANSFER_UPLOAD_TASK)
def upload(self: Task[Any, Any], ref: dict[str, Any]) -> dict[str, Any]:
    """Source side: put the value in the shared store ("s3"), or say "cached"/"direct"."""
    return _run(self, ref, upload_artifact)


@shared_task(bind=True, name=TRANSFER_DOWNLOAD_TASK)
def download(self: Task[Any, Any], ref: dict[str, Any]) -> dict[str, Any]:
    """Target side: fill this worker's cache from the shared store."""
    return _run(self, ref, download_artifact)
