"""``somatize-tasks reaper``: a watcher that repairs runs after a worker dies.

Workers run one already; this one is for deployments that want a watcher
independent of any worker (or producers that submit and leave).
"""

from __future__ import annotations

import time

import click

from somatize_tasks.celery_app import create_app
from somatize_tasks.cli import main
from somatize_tasks.cli.common import friendly_errors
from somatize_tasks.runtime.context import run_context
from somatize_tasks.runtime.reaper import Reaper
from somatize_tasks.settings import Settings


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
