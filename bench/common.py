"""What the benchmarks share: a Redis to run against, settings for a throwaway cluster,
and what a finished run keeps in it."""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from somatize_tasks.config.settings import Settings
from somatize_tasks.runtime.producer.handle import PlanRun
from somatize_tasks.store.ram import ram_tier
from testkit.services import start_redis_server


@contextmanager
def bench_settings(name: str, **overrides: Any) -> Iterator[tuple[Settings, Path]]:
    """Settings on a throwaway redis-server of the benchmark's own (a Redis the
    user runs is never touched), a unique key prefix, a shared-directory store in
    a temp dir; and that temp dir."""
    server, port = start_redis_server()
    redis_url = f"redis://127.0.0.1:{port}/0"
    root = Path(tempfile.mkdtemp(prefix=f"{name}-"))
    prefix = f"{name}-{uuid.uuid4().hex[:8]}"
    options: dict[str, Any] = {
        "redis_url": redis_url,
        "key_prefix": prefix,
        "store_kind": "local",
        "store_dir": root / "store",
        "cache_dir": root / "cache",
        "heartbeat_interval_s": 0.5,
        "worker_id": f"{prefix}-producer",
        # Benchmarks time the runtime computing: a content-cache hit would time nothing.
        "content_cache": False,
        **overrides,
    }
    settings = Settings(**options)
    ram = ram_tier(settings)
    try:
        yield settings, root
    finally:
        if ram is not None:  # values in RAM would outlive the benchmark (runs are not collected)
            shutil.rmtree(ram.root, ignore_errors=True)
        server.kill()
        server.wait()


def finished_run_bytes(run: PlanRun, settle_s: float = 30.0) -> dict[str, int]:
    """Every key of a finished run and its exact size (``MEMORY USAGE key SAMPLES 0``),
    by its part (``meta`` for the run's hash), once its logs are folded: the run's
    last worker does that right after the run's end (``runtime.archive``)."""
    client, state = run._context.redis, run._state
    folded = time.monotonic() + settle_s
    while client.exists(state.history) and time.monotonic() < folded:
        time.sleep(0.05)
    sizes: dict[str, int] = {}
    for raw in client.scan_iter(match=f"{state.meta}*", count=1000):
        part = raw.decode()[len(state.meta) + 1 :] or "meta"
        sizes[part] = int(client.memory_usage(raw, samples=0) or 0)
    return sizes
