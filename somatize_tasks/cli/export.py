"""``somatize-tasks export RUN_ID --soma DIR``: a cluster run as Soma's run directory.

``DIR`` is a Soma tracking root (``.soma``); the run lands in
``DIR/runs/RUN_ID/`` with ``manifest.json``, ``status.json``,
``events.jsonl`` and ``metrics.jsonl``, in Soma's schema
(:mod:`somatize_tasks.soma_export`), so Soma's readers and plots open it.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from somatize_tasks.cli import main
from somatize_tasks.cli.common import friendly_errors
from somatize_tasks.run_record import read_run
from somatize_tasks.settings import Settings
from somatize_tasks.soma_export import write_run_dir
from somatize_tasks.store import key_part


@main.command("export")
@click.argument("run_id")
@click.option("--soma", "root", required=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="Soma tracking root (e.g. .soma): the run goes to DIR/runs/RUN_ID/.")
@friendly_errors
def export(run_id: str, root: Path) -> None:
    """Write run RUN_ID as a Soma run directory (events.jsonl, manifest.json, status.json)."""
    key_part("run id", run_id)
    record = read_run(Settings.from_env(), run_id)
    try:
        run_dir = write_run_dir(root, record.status, record.history, record.plan,
                                record.params, time.time())  # fmt: skip
    except OSError as exc:
        raise click.ClickException(f"cannot write under '{root}': {exc.strerror}") from None
    click.echo(f"wrote {run_dir} ({record.status.state}, {len(record.status.nodes)} nodes)")
