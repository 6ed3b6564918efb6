"""No-op work for bench_dispatch: a catalog node and the same as a plain Celery task."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from somatize_tasks import node


@node("noop")
def noop(value: Any = None) -> Any:
    return value


@shared_task(name="bench.noop")
def plain_noop(value: Any = None) -> Any:
    return value


@shared_task(name="bench.collect")
def plain_collect(values: list[Any]) -> int:
    return len(values)
