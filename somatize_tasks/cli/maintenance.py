"""Keeping a cluster tidy: ``gc`` deletes what expired runs left behind, now;
``reaper`` runs a watcher that repairs runs after a worker dies.
"""

from __future__ import annotations

import time

import click

from somatize_tasks.cli import main
from somatize_tasks.cli.common import friendly_errors
from somatize_tasks.config.settings import Settings
from somatize_tasks.messaging.celery_app import create_app
from somatize_tasks.runtime.engine.context import run_context
from somatize_tasks.runtime.recovery.reaper import Reaper
from somatize_tasks.store.gc import (
    UPLOAD_GRACE_S,
    CacheSweeper,
    RunCollector,
    cache_roots,
    sweep_temp_files,
)


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
        context.redis,
        context.keys,
        lambda: context.store.shared,
        settings.run_ttl_s,
        uploads_older_than_s,
    )
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
                context.redis,
                context.keys,
                None,
                settings.run_ttl_s,
                settings.gc_interval_s,
                ram_roots=[ram.root],
                spares=ram.spares,
            ).sweep()
    click.echo(
        f"collected {len(runs)} expired run(s) from {context.store.shared.describe()} "
        f"and the runs index; deleted {dirs} expired run dir(s) from local caches, "
        f"{partial} partial file(s) from the shared directory; aborted "
        f"{collector.aborted_uploads} stale multipart upload(s)"
    )


@main.command("reaper")
@click.option("--once", is_flag=True, help="Sweep once and exit (for cron or a check).")
@click.option(
    "--interval",
    type=float,
    default=None,
    help="Seconds between sweeps (default: the heartbeat interval).",
)
@friendly_errors
def reaper(once: bool, interval: float | None) -> None:
    """Repair runs whose nodes were on a worker that died."""
    settings = Settings.from_env()
    watcher = Reaper(run_context(create_app(settings), settings, "reaper"))
    pause = interval or settings.heartbeat_interval_s
    while True:
        repaired = watcher.sweep()
        if repaired:
            click.echo(f"re-routed nodes of run(s): {', '.join(repaired)}")
        elif once:
            click.echo("no run needed repair")
        if once:
            return
        time.sleep(pause)
