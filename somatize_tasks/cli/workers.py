"""``somatize-tasks workers``: the live workers, as a table or as WorkerInfo JSON."""

from __future__ import annotations

import json

import click
from redis.exceptions import RedisError
from rich.console import Console
from rich.table import Table

from somatize_tasks.cli import main
from somatize_tasks.registry import Registry, SeenWorker
from somatize_tasks.settings import Settings, redacted_url


def workers_table(workers: list[SeenWorker]) -> Table:
    table = Table(title=f"{len(workers)} live worker(s)")
    for column in ("id", "name", "tags", "gpu", "cpu", "slots used/total", "last seen"):
        table.add_column(column)
    for worker in workers:
        info = worker.info
        table.add_row(
            info.id, info.name, ",".join(info.tags) or "-", "yes" if info.gpu else "no",
            str(info.cpu_cores), f"{info.active_jobs}/{info.max_concurrent}",
            f"{worker.age_s:.1f} s ago",
        )
    return table


@main.command("workers")
@click.option("--json", "as_json", is_flag=True, help="Print the WorkerInfo list as JSON.")
def workers(as_json: bool) -> None:
    """List the live workers (those whose heartbeat is fresh)."""
    settings = Settings.from_env()
    try:
        live = Registry.from_settings(settings).live()
    except RedisError as exc:
        raise click.ClickException(
            f"cannot read workers from Redis at {redacted_url(settings.redis_url)}: {exc}"
        ) from None
    if as_json:
        click.echo(json.dumps([worker.info.model_dump(mode="json") for worker in live], indent=2))
    else:
        Console().print(workers_table(live))
