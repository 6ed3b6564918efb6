"""``somatize-tasks timeline RUN_ID -o run.html``: draw a run as a Gantt chart.

A row per worker, a bar per node attempt coloured by state (every loop pass
and a dead worker's unfinished attempt included), failures in red with their
error, nodes that never ran marked, transfers as arrows. ``.svg`` writes the
bare SVG; ``.html`` a page with the SVG, the failure and the tables. Nothing is fetched
from the network to view either.
"""

from __future__ import annotations

from pathlib import Path

import click

from somatize_tasks.cli import main
from somatize_tasks.cli.common import friendly_errors
from somatize_tasks.run_record import read_run
from somatize_tasks.settings import Settings
from somatize_tasks.timeline_page import write_timeline

SUFFIXES = (".html", ".htm", ".svg")


@main.command("timeline")
@click.argument("run_id")
@click.option("-o", "--output", "output", required=True,
              type=click.Path(dir_okay=False, writable=True, path_type=Path),
              help="Where to write it: run.html (page with tables) or run.svg (the chart alone).")
@friendly_errors
def timeline(run_id: str, output: Path) -> None:
    """Draw run RUN_ID as a timeline: a row per worker, a bar per node, arrows for transfers."""
    if output.suffix.lower() not in SUFFIXES:
        raise click.UsageError(f"--output must end in .html or .svg, not '{output.name}'")
    record = read_run(Settings.from_env(), run_id)
    status = record.status
    try:
        write_timeline(status, output, record.history)
    except OSError as exc:
        raise click.ClickException(f"cannot write '{output}': {exc.strerror}") from None
    click.echo(f"wrote {output} ({status.state}, {len(status.nodes)} nodes, "
               f"{len(status.transfers)} transfers)")
