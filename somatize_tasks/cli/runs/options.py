"""What the run commands share: their options, reading their files, printing for people.

Everything for people goes to stderr (:data:`people`); stdout carries only
what a script reads (a run id, or JSON with ``--json``).
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console

from somatize_tasks.authoring.bundle import is_bundle_path, read_soma_bundle
from somatize_tasks.cli.common import import_node_modules, load_json_file, split_modules

people = Console(stderr=True)
FINISHED = ("done", "failed", "cancelled")
STATE_STYLE = {
    "done": "green",
    "cached": "green",
    "running": "cyan",
    "failed": "red",
    "cancelled": "yellow",
    "skipped": "dim",
    "pending": "white",
}


def json_out(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, default=str))


def warn(message: str) -> None:
    """One warning line for people (not Python's warning format)."""
    people.print(f"[yellow]warning:[/yellow] {message}", highlight=False)


plan_argument = click.argument(
    "plan_file", metavar="PLAN.json|MODEL.zip", type=click.Path(dir_okay=False)
)
input_option = click.option(
    "--input",
    "input_file",
    type=click.Path(dir_okay=False),
    help="JSON file holding the run's input value.",
)
params_option = click.option(
    "--params",
    "params_file",
    type=click.Path(dir_okay=False),
    help='JSON file mapping node ids to keyword parameters: {"load": {"n": 10}}.',
)
ops_option = click.option(
    "--ops",
    "ops_file",
    type=click.Path(dir_okay=False),
    help="JSON file mapping node ids to catalog names.",
)
deadline_option = click.option(
    "--deadline",
    "deadline_s",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="Fail the run, naming what is still unfinished, if it has not ended this many "
    "seconds after it starts.",
)
nodes_option = click.option(
    "--nodes",
    multiple=True,
    metavar="MODULE[,MODULE]",
    help="Catalog modules to import (found from the current directory too, as workers find them).",
)


def _optional_json(path: str | None, what: str) -> Any:
    return None if path is None else load_json_file(path, what)


def read_run_files(
    plan_file: str,
    input_file: str | None,
    params_file: str | None,
    ops_file: str | None,
    nodes: tuple[str, ...],
) -> tuple[Any, dict[str, Any]]:
    """The plan and the keyword arguments a run takes, from the command's files;
    the ``--nodes`` modules are imported first (a local run needs their catalog)."""
    import_node_modules(split_modules(nodes))
    inputs = {
        "input": _optional_json(input_file, "input"),
        "params": _optional_json(params_file, "params"),
        "ops": _optional_json(ops_file, "ops"),
    }
    if is_bundle_path(plan_file):
        return read_soma_bundle(plan_file), inputs  # a Soma Graph.save bundle runs as it is
    return load_json_file(plan_file, "plan"), inputs
