"""``somatize-tasks worker`` starts this machine's Celery worker on its own queue;
``somatize-tasks workers`` lists the live workers, as a table or as WorkerInfo JSON.
"""

from __future__ import annotations

import json
from typing import Any

import click
from pydantic import ValidationError
from redis.exceptions import RedisError
from rich.console import Console
from rich.table import Table

from somatize_tasks.catalog.entries import load_catalog_modules
from somatize_tasks.cli import main
from somatize_tasks.cli.common import settings_problems
from somatize_tasks.config.keys import queue_name
from somatize_tasks.config.settings import Settings, redacted_url
from somatize_tasks.errors import CatalogError
from somatize_tasks.messaging.celery_app import create_app
from somatize_tasks.workers.identity import Clash, recent_clashes
from somatize_tasks.workers.registry import Registry, SeenWorker

_CONCURRENCY_FLAGS = ("-c", "--concurrency")
_FLAGS = {"worker_tags": "--tags", "worker_name": "--name", "gpu": "--gpu/--no-gpu"}


def worker_settings(**options: Any) -> Settings:
    """Settings from the environment, with the options the user gave on top."""
    overrides = {name: value for name, value in options.items() if value is not None}
    try:
        return Settings.from_env(**overrides)
    except ValidationError as exc:
        flags = {name: _FLAGS.get(name, "--" + name.replace("_", "-")) for name in overrides}
        problems = settings_problems(exc, flags)
        raise click.ClickException(f"invalid worker settings: {problems}") from None


def celery_argv(settings: Settings, extra: tuple[str, ...]) -> list[str]:
    """The ``celery worker`` argument list: own queue, readable node name, events on."""
    argv = [
        "worker",
        "-Q",
        queue_name(settings.worker_id),
        "-n",
        f"{settings.worker_id}@%h",
        "--task-events",
    ]
    given_concurrency = any(arg.split("=")[0] in _CONCURRENCY_FLAGS for arg in extra)
    if settings.max_concurrent is not None and not given_concurrency:
        argv += ["--concurrency", str(settings.max_concurrent)]
    return argv + list(extra)


@main.command(
    "worker",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option("--worker-id", help="Stable id of this worker (default: from the hostname).")
@click.option("--tags", "worker_tags", help="Comma-separated capability tags, e.g. gpu,training.")
@click.option(
    "--max-concurrent",
    type=click.IntRange(min=1),
    help="Node slots advertised (default: the pool's concurrency).",
)
@click.option("--nodes", help="Comma-separated catalog modules to import at start.")
@click.option(
    "--allowed-modules",
    help="Comma-separated module prefixes whose classes a Soma bundle may name "
    "(SOMATIZE_ALLOWED_MODULES; default: none).",
)
@click.option("--gpu/--no-gpu", default=None, help="Force GPU presence (default: detect).")
@click.option("--name", "worker_name", help="Readable name (default: <worker-id>@<host>).")
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED)
def worker(celery_args: tuple[str, ...], **options: Any) -> None:
    """Start a worker consuming only its own queue, heartbeating into Redis."""
    settings = worker_settings(**options)
    try:
        # Import the catalog here first: Celery swallows errors raised while a
        # worker starts, and a worker without its nodes only fails node by node.
        load_catalog_modules(settings.nodes)
    except CatalogError as exc:
        raise click.ClickException(f"{exc}. Check --nodes (or SOMATIZE_NODES).") from None
    app = create_app(settings)
    app.worker_main(celery_argv(settings, celery_args))


def workers_table(workers: list[SeenWorker], clashes: dict[str, Clash] | None = None) -> Table:
    """The live workers; an id two live processes beat under is marked, and said so
    below the table (:mod:`somatize_tasks.workers.identity`)."""
    clashes = clashes or {}
    caption = [
        f"worker id {worker_id}: two live processes heartbeat under it ({c.first} and "
        f"{c.second}, {c.age_s:.0f} s ago): stop one, or give it another --worker-id"
        for worker_id, c in sorted(clashes.items())
    ]
    table = Table(title=f"{len(workers)} live worker(s)", caption="\n".join(caption) or None)
    for column in ("id", "name", "tags", "gpu", "cpu", "slots used/total", "last seen"):
        table.add_column(column)
    for worker in workers:
        info = worker.info
        table.add_row(
            f"{info.id} (DUPLICATE)" if info.id in clashes else info.id,
            info.name,
            ",".join(info.tags) or "-",
            "yes" if info.gpu else "no",
            str(info.cpu_cores),
            f"{info.active_jobs}/{info.max_concurrent}",
            f"{worker.age_s:.1f} s ago",
        )
    return table


@main.command("workers")
@click.option("--json", "as_json", is_flag=True, help="Print the WorkerInfo list as JSON.")
def workers(as_json: bool) -> None:
    """List the live workers (those whose heartbeat is fresh)."""
    settings = Settings.from_env()
    try:
        registry = Registry.from_settings(settings)
        live = registry.live()
        clashes = recent_clashes(registry, [worker.info.id for worker in live])
    except RedisError as exc:
        raise click.ClickException(
            f"cannot read workers from Redis at {redacted_url(settings.redis_url)}: {exc}"
        ) from None
    if as_json:
        click.echo(json.dumps([worker.info.model_dump(mode="json") for worker in live], indent=2))
        for worker_id in sorted(clashes):  # the JSON keeps its shape: said on stderr
            click.echo(f"warning: two live processes heartbeat as {worker_id}", err=True)
    else:
        Console().print(workers_table(live, clashes))
