"""Looking at runs: ``timeline RUN_ID -o run.html`` (a Gantt chart), ``dashboard``
(the live page, :mod:`somatize_tasks.observe.dashboard`) and ``export RUN_ID --soma DIR``
(a cluster run as Soma's run directory).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import click
from rich.console import Console
from tornado.ioloop import IOLoop

from somatize_tasks.cli import main
from somatize_tasks.cli.common import friendly_errors
from somatize_tasks.config.settings import Settings, redacted_url
from somatize_tasks.observe.dashboard import make_app, parse_credentials, redis_answers
from somatize_tasks.observe.dashboard_access import AUTH_VARIABLE, HostCheck, read_credentials
from somatize_tasks.observe.run_record import read_run
from somatize_tasks.observe.soma_export import write_run_dir
from somatize_tasks.observe.timeline_page import write_timeline
from somatize_tasks.store import key_part

SUFFIXES = (".html", ".htm", ".svg")


@main.command("timeline")
@click.argument("run_id")
@click.option(
    "-o",
    "--output",
    "output",
    required=True,
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Where to write it: run.html (page with tables) or run.svg (the chart alone).",
)
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
    click.echo(
        f"wrote {output} ({status.state}, {len(status.nodes)} nodes, "
        f"{len(status.transfers)} transfers)"
    )


people = Console(stderr=True, highlight=False)


@main.command("dashboard")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@click.option(
    "--address",
    default="127.0.0.1",
    show_default=True,
    help=f"Where to listen; anything but loopback needs credentials ({AUTH_VARIABLE}).",
)
@click.option(
    "--basic-auth",
    "basic_auth",
    metavar="USER:PASSWORD",
    hidden=True,  # refused: ps shows it to everyone (dashboard_access)
)
@click.option(
    "--basic-auth-file",
    "auth_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help=f"Require the credentials on its first line, USER:PASSWORD (or set {AUTH_VARIABLE}).",
)
@click.option(
    "--host",
    "hosts",
    multiple=True,
    metavar="NAME",
    help="Another name it is reached by (a DNS name in front of it); repeatable.",
)
@friendly_errors
def dashboard(
    port: int, address: str, basic_auth: str | None, auth_file: Path | None, hosts: tuple[str, ...]
) -> None:
    """Serve a live page of workers, runs and run timelines (Ctrl-C stops it)."""
    try:
        given = read_credentials(basic_auth, os.environ.get(AUTH_VARIABLE) or None, auth_file)
        credentials = parse_credentials(given, address)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    settings = Settings.from_env()
    unreachable = redis_answers(settings)
    if unreachable is not None:  # serve anyway: the page says so until Redis answers
        click.echo(f"{unreachable}; the page says so until it answers", err=True)  # one line
    app = make_app(settings, credentials, hosts=HostCheck(hosts))
    try:
        app.listen(port, address)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {address}:{port}: {exc.strerror}") from None
    host = f"[{address}]" if ":" in address else address
    people.print(
        f"dashboard on http://{host}:{port}/ (Redis {redacted_url(settings.redis_url)},"
        f" key prefix {settings.key_prefix}); Ctrl-C stops it"
    )
    try:
        IOLoop.current().start()
    except KeyboardInterrupt:
        people.print("dashboard stopped")


@main.command("export")
@click.argument("run_id")
@click.option(
    "--soma",
    "root",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Soma tracking root (e.g. .soma): the run goes to DIR/runs/RUN_ID/.",
)
@friendly_errors
def export(run_id: str, root: Path) -> None:
    """Write run RUN_ID as a Soma run directory (events.jsonl, manifest.json, status.json)."""
    key_part("run id", run_id)
    record = read_run(Settings.from_env(), run_id)
    try:
        run_dir = write_run_dir(
            root, record.status, record.history, record.plan, record.params, time.time()
        )
    except OSError as exc:
        raise click.ClickException(f"cannot write under '{root}': {exc.strerror}") from None
    click.echo(f"wrote {run_dir} ({record.status.state}, {len(record.status.nodes)} nodes)")
