"""Keeping a cluster tidy: ``gc`` deletes what expired runs left behind, now;
``reaper`` runs a watcher that repairs runs after a worker dies; ``cache``
keeps the content cache in bounds (stats, gc by value density, pin, verify).
"""

from __future__ import annotations

import json
import time

import click

from somatize_tasks.cache.backend import CacheBackend, cache_backend
from somatize_tasks.cache.eviction import collect, pin, stats, unpin, verify
from somatize_tasks.cli import main
from somatize_tasks.cli.common import friendly_errors
from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import CacheError
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


@main.group("cache")
def cache_group() -> None:
    """The content cache every worker shares: stats, gc, pins, verify."""


def _backend() -> CacheBackend:
    return cache_backend(Settings.from_env())


@cache_group.command("stats")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@friendly_errors
def cache_stats(as_json: bool) -> None:
    """Entries, values, bytes held, compute banked and hits served."""
    backend = _backend()
    figures = stats(backend)
    if as_json:
        click.echo(json.dumps(figures))
        return
    click.echo(
        f"{figures['records']} entries ({figures['inline']} inline), {figures['values']} "
        f"stored values, {_bytes(int(figures['bytes']))} in {backend.describe()}; "
        f"{figures['compute_banked_s']} s of compute banked, {figures['hits']} hits served, "
        f"{figures['pins']} pinned"
    )


@cache_group.command("gc")
@click.option(
    "--max-size",
    "max_size",
    required=True,
    metavar="SIZE",
    help="Evict until the cache holds at most this much: bytes, or 500M, 20G, 1T.",
)
@click.option(
    "--min-age",
    "min_age_s",
    type=click.FloatRange(min=0),
    default=3600.0,
    show_default=True,
    help="Never evict an entry used less than this many seconds ago.",
)
@friendly_errors
def cache_gc(max_size: str, min_age_s: float) -> None:
    """Evict the values of least value density, (compute ms + 1) x recency / size,
    until the cache fits in --max-size. Pinned entries stay."""
    report = collect(_backend(), parse_size(max_size), min_age_s)
    click.echo(
        f"evicted {report.values_evicted} value(s) and {report.records_evicted} entr(y/ies): "
        f"{_bytes(report.bytes_before)} -> {_bytes(report.bytes_after)}"
        f" ({report.pinned} pinned)"
    )


@cache_group.command("pin")
@click.argument("name")
@click.argument("key", required=False)
@click.option("--remove", is_flag=True, help="Remove the pin NAME.")
@friendly_errors
def cache_pin(name: str, key: str | None, remove: bool) -> None:
    """Pin the entry KEY under NAME: gc never evicts it (KEY: a node's cache_key,
    as `somatize-tasks status RUN --json` shows it)."""
    backend = _backend()
    if remove:
        found = unpin(backend, name)
        click.echo(f"removed pin {name}" if found else f"no pin named {name}")
        return
    if key is None:
        raise click.UsageError("give the KEY to pin (or --remove)")
    record = pin(backend, name, key)
    click.echo(f"pinned {key[:16]}... (node '{record.node_id}', run {record.run_id}) as {name}")


@cache_group.command("verify")
@click.option("--delete-bad", is_flag=True, help="Delete entries whose value does not match.")
@friendly_errors
def cache_verify(delete_bad: bool) -> None:
    """Decode every entry and check it against its content hash; exit 1 if one fails."""
    report = verify(_backend(), delete_bad=delete_bad)
    click.echo(
        f"{report.ok} entr(y/ies) match their content hash, {len(report.bad)} do not, "
        f"{len(report.missing)} have no value (evicted: recomputed when next needed)"
    )
    for key in report.bad:
        click.echo(f"bad: {key}" + (" (deleted)" if delete_bad else ""))
    if report.bad:
        raise SystemExit(1)


_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def parse_size(text: str) -> int:
    """``20G`` -> bytes (powers of 1024; a trailing ``B`` or ``iB`` is allowed)."""
    cleaned = text.strip().upper().removesuffix("IB").removesuffix("B")
    number, unit = (cleaned[:-1], cleaned[-1]) if cleaned[-1:] in _UNITS else (cleaned, "")
    try:
        size = float(number) * _UNITS[unit]
    except ValueError:
        raise CacheError(f"--max-size {text!r} is not a size (bytes, or 500M, 20G, 1T)") from None
    if size < 0:
        raise CacheError(f"--max-size {text!r} is negative")
    return int(size)


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"
