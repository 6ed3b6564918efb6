"""``somatize-tasks gc``: delete what expired runs left behind, now.

Workers already do this on their own (the elected reaper collects the
shared store and the runs index, every worker sweeps its own cache, every
``SOMATIZE_GC_INTERVAL_S``); this command is for a cron job, for machines
whose workers are stopped, and for the producer's own cache.
"""

from __future__ import annotations

import click

from somatize_tasks.celery_app import create_app
from somatize_tasks.cli import main
from somatize_tasks.cli.common import friendly_errors
from somatize_tasks.gc import (
    UPLOAD_GRACE_S,
    CacheSweeper,
    RunCollector,
    cache_roots,
    sweep_temp_files,
)
from somatize_tasks.runtime.context import run_context
from somatize_tasks.settings import Settings


@main.command("gc")
@click.option(
    "--worker-id",
    "worker_ids",
    multiple=True,
    help="Sweep only this worker's cache (repeatable). Default: every cache under "
    "SOMATIZE_CACHE_DIR on this machine (they must all belong to this key prefix).",
)
@click.option("--no-caches", is_flag=True, help="Only the shared store and the runs index.")
@click.option(
    "--uploads-older-than-s",
    type=click.FloatRange(min=0),
    default=UPLOAD_GRACE_S,
    show_default=True,
    help="Abort S3 multipart uploads under the prefix started longer ago than this.",
)
@friendly_errors
def gc(worker_ids: tuple[str, ...], no_caches: bool, uploads_older_than_s: float) -> None:
    """Delete the artifacts and index entries of runs whose state expired, partial
    files of killed writers, and abandoned multipart uploads."""
    settings = Settings.from_env()
    context = run_context(create_app(settings), settings, "gc")
    collector = RunCollector(
        context.redis, context.keys, lambda: context.store.shared, settings.run_ttl_s,
        uploads_older_than_s,
    )  # fmt: skip
    runs = collector.collect()
    dirs = 0
    partial = sweep_temp_files(settings.store_dir) if settings.store_kind == "local" else 0
    if not no_caches:
        for root in cache_roots(settings.cache_dir, worker_ids):
            dirs += CacheSweeper(
                context.redis, context.keys, root, settings.run_ttl_s, settings.gc_interval_s
            ).sweep()
        ram = context.store.ram
        if ram is not None:
            dirs += CacheSweeper(
                context.redis, context.keys, None, settings.run_ttl_s, settings.gc_interval_s,
                ram_roots=[ram.root], spares=ram.spares,
            ).sweep()  # fmt: skip
    click.echo(
        f"collected {len(runs)} expired run(s) from {context.store.shared.describe()} "
        f"and the runs index; deleted {dirs} expired run dir(s) from local caches, "
        f"{partial} partial file(s) from the shared directory; aborted "
        f"{collector.aborted_uploads} stale multipart upload(s)"
    )

