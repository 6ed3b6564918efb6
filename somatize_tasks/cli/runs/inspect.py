"""``runs``, ``status``, ``cancel`` and ``forget``: finding runs and following one."""

from __future__ import annotations

import time
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from somatize_tasks.cli import main
from somatize_tasks.cli.common import friendly_errors
from somatize_tasks.cli.runs.options import STATE_STYLE, json_out
from somatize_tasks.config.connections import redis_client
from somatize_tasks.config.keys import RedisKeys
from somatize_tasks.config.settings import Settings
from somatize_tasks.observe.dashboard import runs_page
from somatize_tasks.runtime.engine.context import producer_context
from somatize_tasks.runtime.producer.forget import forget_run
from somatize_tasks.runtime.producer.handle import PlanRun, RunStatus
from somatize_tasks.store import key_part

RUN_STATES = ("running", "done", "failed", "cancelled")
#: ``runs --state`` reads the index newest first, at most this far back.
MOST_SCANNED = 10_000


def status_table(status: RunStatus) -> Table:
    table = Table(title=f"run {status.run_id}: {status.state}")
    for column in ("node", "state", "worker", "seconds"):
        table.add_column(column)
    for node_id, node in status.nodes.items():
        took = f"{node.ended_at - node.started_at:.2f}" if node.started_at and node.ended_at else ""
        state = "cached" if node.state == "done" and node.cached else node.state
        style = STATE_STYLE.get(state, "")
        table.add_row(node_id, f"[{style}]{state}[/{style}]", node.worker or "", took)
    return table


def progress_line(done: int, total: int, cached: int) -> str:
    """``progress: 5/5 nodes (4 ran, 1 from the cache)``."""
    line = f"progress: {done}/{total} nodes"
    return f"{line} ({done - cached} ran, {cached} from the cache)" if cached else line


@main.command("status")
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@friendly_errors
def status(run_id: str, as_json: bool) -> None:
    """Show a run's state, progress, warnings and each node's state and worker."""
    run = PlanRun.attach(run_id, Settings.from_env())
    current = run.status()
    warnings = run.warnings
    if as_json:
        json_out(
            {
                "run_id": current.run_id,
                "state": current.state,
                "error": current.error,
                "progress": {**vars(run.progress()), "cached": current.cached},
                "warnings": warnings,
                "nodes": {k: vars(v) for k, v in current.nodes.items()},
                "transfers": current.transfers,
            }
        )
        return
    console = Console()
    console.print(status_table(current))
    progress = run.progress()
    console.print(progress_line(progress.done, progress.total, current.cached))
    for warning in warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
    if current.error:
        console.print(
            f"[red]node '{current.error.get('node_id')}' on worker "
            f"'{current.error.get('worker_id')}' failed: {current.error.get('message')}[/red]"
        )


@main.command("runs")
@click.option(
    "--state",
    "states",
    type=click.Choice(RUN_STATES),
    multiple=True,
    help="Only runs in this state (repeat for several).",
)
@click.option(
    "--limit", type=click.IntRange(1, 1000), default=20, show_default=True, help="How many."
)
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")
@friendly_errors
def runs(states: tuple[str, ...], limit: int, as_json: bool) -> None:
    """List recent runs, newest first: id, state, progress, age and plan size."""
    settings = Settings.from_env()
    found = recent_runs(settings, set(states), limit)
    if as_json:
        json_out(found)
        return
    now = time.time()
    table = Table(title=f"{len(found)} run(s)" + (f" ({', '.join(states)})" if states else ""))
    for column in ("run", "state", "progress", "age", "nodes"):
        table.add_column(column, justify="right" if column in ("age", "nodes") else "left")
    for run in found:
        style = STATE_STYLE.get(run["state"], "")
        table.add_row(
            run["run_id"],
            f"[{style}]{run['state']}[/{style}]",
            f"{run['done']}/{run['total']}",
            age(now - run["created_at"]),
            str(run["total"]),
        )
    Console().print(table)


def recent_runs(settings: Settings, states: set[str], limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` runs in ``states`` (any state when empty)."""
    client, keys = redis_client(settings), RedisKeys(settings.key_prefix)
    found: list[dict[str, Any]] = []
    start, page = 0, max(limit, 100)
    while len(found) < limit and start < MOST_SCANNED:
        batch, more = runs_page(client, keys, start, page)
        found += [r for r in batch if not states or r["state"] in states]
        if not more:
            break
        start += page
    return found[:limit]


def age(seconds: float) -> str:
    """A short age: ``42 s``, ``7 min``, ``3.5 h``, ``2 d``."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} d"


@main.command("cancel")
@click.argument("run_id")
@friendly_errors
def cancel(run_id: str) -> None:
    """Cancel a run: nothing new starts, running nodes are revoked."""
    run = PlanRun.attach(run_id, Settings.from_env())
    if run.cancel():
        click.echo(f"run {run_id} cancelled")
    else:
        click.echo(f"run {run_id} had already ended ({run.status().state}); nothing to cancel")


@main.command("forget")
@click.argument("run_ids", nargs=-1, required=True, metavar="RUN_ID...")
@friendly_errors
def forget(run_ids: tuple[str, ...]) -> None:
    """Delete ended runs' state and values now (they expire after
    SOMATIZE_RUN_TTL_S otherwise); a running run must be cancelled first."""
    settings = Settings.from_env()
    context = producer_context(settings)
    for run_id in run_ids:
        key_part("run id", run_id)  # a malformed id is an error naming it, not a miss
        if forget_run(context, run_id):
            click.echo(f"run {run_id} forgotten: its state and values are deleted")
        else:
            click.echo(f"run {run_id} is not known to Redis (wrong id, or already gone)")
