"""``somatize-tasks dashboard``: serve the live page (:mod:`somatize_tasks.dashboard`)."""

from __future__ import annotations

import click
from rich.console import Console
from tornado.ioloop import IOLoop

from somatize_tasks.cli import main
from somatize_tasks.cli.common import friendly_errors
from somatize_tasks.dashboard import make_app, parse_credentials
from somatize_tasks.settings import Settings, redacted_url

people = Console(stderr=True, highlight=False)


@main.command("dashboard")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@click.option("--address", default="127.0.0.1", show_default=True,
              help="Where to listen; anything but loopback needs --basic-auth.")
@click.option("--basic-auth", "basic_auth", envvar="SOMATIZE_DASHBOARD_AUTH",
              metavar="USER:PASSWORD", help="Require these credentials (like Flower's).")
@friendly_errors
def dashboard(port: int, address: str, basic_auth: str | None) -> None:
    """Serve a live page of workers, runs and run timelines (Ctrl-C stops it)."""
    try:
        credentials = parse_credentials(basic_auth, address)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    settings = Settings.from_env()
    app = make_app(settings, credentials)
    try:
        app.listen(port, address)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {address}:{port}: {exc.strerror}") from None
    host = f"[{address}]" if ":" in address else address
    people.print(f"dashboard on http://{host}:{port}/ (Redis {redacted_url(settings.redis_url)},"
                 f" key prefix {settings.key_prefix}); Ctrl-C stops it")
    try:
        IOLoop.current().start()
    except KeyboardInterrupt:
        people.print("dashboard stopped")
