"""``somatize-tasks run``: a plan (or a Soma bundle) run here, in this process.

``submit --local`` ends here too: the same run, no worker needed.
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console

from somatize_tasks.cli import main
from somatize_tasks.cli.common import friendly_errors
from somatize_tasks.cli.modes import local_states, mode_options
from somatize_tasks.cli.runs.options import (
    deadline_option,
    input_option,
    json_out,
    nodes_option,
    ops_option,
    params_option,
    people,
    plan_argument,
    read_run_files,
    warn,
)
from somatize_tasks.runtime.producer.fitted_states import write_bundle
from somatize_tasks.runtime.producer.local import run_local


def run_here(
    plan: Any,
    inputs: dict[str, Any],
    run_options: dict[str, Any],
    *,
    as_json: bool,
    deadline_s: float | None,
    states_out: str | None = None,
    quiet: bool = False,
) -> None:
    """Run ``plan`` in this process and print its output (or one error line). A run
    here does not use the content cache (``--cache``/``--seed`` have no effect)."""
    run_options = {k: v for k, v in run_options.items() if k not in ("cache", "seed")}
    states = local_states(run_options.pop("states_from", None))
    result = run_local(plan, **inputs, **run_options, states=states, deadline_s=deadline_s)
    if not quiet:
        for warning in result.warnings:
            warn(warning)
    if result.status != "done":
        error = result.error or {}
        where = f"node '{error['node_id']}' failed: " if error.get("node_id") else ""
        raise click.ClickException(f"{where}{error.get('type')}: {error.get('message')}")
    if states_out is not None:
        write_bundle(states_out, result.states)
        if not quiet:
            people.print(f"wrote the states of {len(result.states)} nodes to {states_out}")
    if as_json or quiet:
        json_out(result.output)
    else:
        Console().print_json(json.dumps(result.output, default=str))


@main.command("run")
@plan_argument
@input_option
@params_option
@ops_option
@nodes_option
@mode_options
@click.option(
    "--states-out",
    type=click.Path(dir_okay=False),
    help="After a fit, write the states it learned to this states file.",
)
@click.option("--json", "as_json", is_flag=True, help="Print only the output, as JSON.")
@deadline_option
@friendly_errors
def run(
    plan_file: str,
    input_file: str | None,
    params_file: str | None,
    ops_file: str | None,
    nodes: tuple[str, ...],
    states_out: str | None,
    as_json: bool,
    deadline_s: float | None,
    run_options: dict[str, Any],
) -> None:
    """Run PLAN.json (or a Soma bundle MODEL.zip) here, in this process (no workers;
    Redis only for --states-from RUN_ID)."""
    plan, inputs = read_run_files(plan_file, input_file, params_file, ops_file, nodes)
    run_here(
        plan, inputs, run_options, as_json=as_json, deadline_s=deadline_s, states_out=states_out
    )
