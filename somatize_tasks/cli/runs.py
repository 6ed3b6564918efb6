"""``submit``, ``status``, ``cancel`` and ``run``: starting and following runs.

``submit`` prints the run id and the distribution; with ``--wait`` a live
progress bar (overall and per worker) and then the output. With ``--json``
stdout carries only JSON (the output, or the run id and distribution), so
it can be piped; everything for people goes to stderr.
"""

from __future__ import annotations

import json
import time
import warnings
from collections import Counter
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from scheduler import DistributionPlan, PlacementError, WorkerInfo
from somatize_tasks.authoring.bundle import is_bundle_path, read_soma_bundle
from somatize_tasks.cli import main
from somatize_tasks.cli.common import (
    friendly_errors,
    import_node_modules,
    load_json_file,
    split_modules,
)
from somatize_tasks.cli.modes import local_states, mode_options
from somatize_tasks.cli.plan import print_report
from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import NoWorkersError
from somatize_tasks.runtime.engine.context import producer_context
from somatize_tasks.runtime.producer.fitted_states import write_bundle
from somatize_tasks.runtime.producer.forget import forget_run
from somatize_tasks.runtime.producer.handle import PlanRun, RunStatus
from somatize_tasks.runtime.producer.local import run_local
from somatize_tasks.runtime.producer.submit import submit_plan
from somatize_tasks.store import key_part

people = Console(stderr=True)
FINISHED = ("done", "failed", "cancelled")
STATE_STYLE = {
    "done": "green",
    "running": "cyan",
    "failed": "red",
    "cancelled": "yellow",
    "skipped": "dim",
    "pending": "white",
}


def _json_out(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, default=str))


def _show_distribution(distribution: DistributionPlan, settings: Settings) -> None:
    """The placement report of ``somatize-tasks plan``, for the workers the run uses,
    with each transfer named as this run moves it (the scheduler only says "s3")."""
    names = {a.worker_id: a.worker_name for a in distribution.assignments}
    workers = [WorkerInfo(id=wid, name=name) for wid, name in names.items()]
    print_report(distribution, workers, console=people, via=lambda _: transfer_words(settings))


def transfer_words(settings: Settings) -> str:
    """How a value crosses workers in this deployment: inline when small, else the store."""
    store = "s3" if settings.store_kind == "s3" else "shared directory"
    return f"inline if ≤ {_size(settings.inline_max_bytes)}, else {store}"


def _size(n: int) -> str:
    return f"{n // 1024} KiB" if n >= 1024 and n % 1024 == 0 else f"{n} B"


def _cancel_on_second_interrupt(run: PlanRun, window_s: float = 2.0) -> None:
    """After a Ctrl-C: the run goes on; say so, and cancel it if Ctrl-C comes again soon."""
    people.print(
        f"\n[yellow]stopped following run {run.id}; it goes on on the workers.[/yellow]\n"
        f"cancel it with: somatize-tasks cancel {run.id}\n"
        f"(press Ctrl-C again within {window_s:.0f} s to cancel it now)"
    )
    try:
        time.sleep(window_s)
    except KeyboardInterrupt:
        if run.cancel():
            people.print(f"run {run.id} cancelled")
        else:
            people.print(f"run {run.id} had already ended; nothing to cancel")
    raise SystemExit(130)


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
    help="Catalog modules to import (for running here).",
)


def _optional_json(path: str | None, what: str) -> Any:
    return None if path is None else load_json_file(path, what)


def _read_run_files(
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


@main.command("submit")
@plan_argument
@input_option
@params_option
@ops_option
@nodes_option
@mode_options
@click.option(
    "--wait", is_flag=True, help="Follow the run with a progress bar and print its output."
)
@click.option(
    "--timeout", type=float, default=None, help="With --wait: give up after this many seconds."
)
@click.option("--json", "as_json", is_flag=True, help="Print only JSON on stdout.")
@deadline_option
@click.option(
    "--require-workers", is_flag=True, help="Fail instead of running here when no worker is live."
)
@friendly_errors
def submit(
    plan_file: str,
    input_file: str | None,
    params_file: str | None,
    ops_file: str | None,
    nodes: tuple[str, ...],
    wait: bool,
    timeout: float | None,
    as_json: bool,
    require_workers: bool,
    deadline_s: float | None,
    run_options: dict[str, Any],
) -> None:
    """Submit PLAN.json to the live workers (a plan, or {"plan", "predecessors"}), or a
    Soma checkpoint bundle MODEL.zip (run forward with its states)."""
    plan, inputs = _read_run_files(plan_file, input_file, params_file, ops_file, nodes)
    settings = Settings.from_env()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            run = submit_plan(
                plan,
                **inputs,
                **run_options,
                require_workers=require_workers,
                settings=settings,
                deadline_s=deadline_s,
            )
        except NoWorkersError as exc:
            raise click.ClickException(
                f"{exc.reason}; refusing to run here (--require-workers). Start a worker "
                "(somatize-tasks worker --tags ...), or drop --require-workers to run the plan "
                "in this process."
            ) from None
        except PlacementError as exc:
            raise click.ClickException(
                f"{exc.problem}. Start a worker that satisfies the target, or free capacity on one."
            ) from None
    for warning in caught:  # for people: one line each, not Python's warning format
        people.print(f"[yellow]warning:[/yellow] {warning.message}")
    people.print(f"run [bold]{run.id}[/bold]")
    _show_distribution(run.distribution, settings)
    if not wait:
        if as_json:
            _json_out({"run_id": run.id, "distribution": run.distribution.model_dump(mode="json")})
        else:
            people.print(f"follow it with: somatize-tasks status {run.id}")
            click.echo(run.id)  # stdout: RUN=$(somatize-tasks submit plan.json)
        return
    try:
        follow(run, timeout)
    except KeyboardInterrupt:
        _cancel_on_second_interrupt(run)
    output = run.wait(timeout=5)
    if as_json:
        _json_out(output)
    else:
        people.print("[bold green]output[/bold green]")
        Console().print_json(json.dumps(output, default=str))


def follow(run: PlanRun, timeout: float | None = None, interval_s: float = 0.2) -> None:
    """A live progress bar: all nodes, and each worker's, until the run ends."""
    per_worker = Counter(a.worker_id for a in run.distribution.assignments)
    assigned = {a.node_id: a.worker_id for a in run.distribution.assignments}
    deadline = None if timeout is None else time.monotonic() + timeout
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=people, transient=False) as bar:
        overall = bar.add_task("[bold]all nodes", total=run.progress().total)
        lanes = {w: bar.add_task(f"  {w}", total=n) for w, n in sorted(per_worker.items())}
        while True:
            run.watch()  # following a run makes this process one of its watchers
            status = run.status()
            bar.update(overall, completed=run.progress().done)
            done_by = Counter(  # skipped arms and loop controllers count for their lane
                n.worker or assigned.get(node_id)
                for node_id, n in status.nodes.items()
                if n.state in ("done", "skipped")
            )
            for worker, task in lanes.items():
                bar.update(task, completed=done_by.get(worker, 0))
            if status.state in FINISHED:
                return
            if deadline is not None and time.monotonic() > deadline:
                raise click.ClickException(f"run {run.id} still running after {timeout} s")
            time.sleep(interval_s)


def status_table(status: RunStatus) -> Table:
    table = Table(title=f"run {status.run_id}: {status.state}")
    for column in ("node", "state", "worker", "seconds"):
        table.add_column(column)
    for node_id, node in status.nodes.items():
        took = f"{node.ended_at - node.started_at:.2f}" if node.started_at and node.ended_at else ""
        style = STATE_STYLE.get(node.state, "")
        table.add_row(node_id, f"[{style}]{node.state}[/{style}]", node.worker or "", took)
    return table


@main.command("status")
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@friendly_errors
def status(run_id: str, as_json: bool) -> None:
    """Show a run's state, progress and each node's state and worker."""
    run = PlanRun.attach(run_id, Settings.from_env())
    current = run.status()
    if as_json:
        _json_out(
            {
                "run_id": current.run_id,
                "state": current.state,
                "error": current.error,
                "progress": vars(run.progress()),
                "nodes": {k: vars(v) for k, v in current.nodes.items()},
                "transfers": current.transfers,
            }
        )
        return
    console = Console()
    console.print(status_table(current))
    progress = run.progress()
    console.print(f"progress: {progress.done}/{progress.total} nodes")
    if current.error:
        console.print(
            f"[red]node '{current.error.get('node_id')}' on worker "
            f"'{current.error.get('worker_id')}' failed: {current.error.get('message')}[/red]"
        )


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
    plan, inputs = _read_run_files(plan_file, input_file, params_file, ops_file, nodes)
    states = local_states(run_options.pop("states_from"))
    result = run_local(plan, **inputs, **run_options, states=states, deadline_s=deadline_s)
    for warning in result.warnings:
        people.print(f"[yellow]warning:[/yellow] {warning}")
    if result.status != "done":
        error = result.error or {}
        where = f"node '{error['node_id']}' failed: " if error.get("node_id") else ""
        raise click.ClickException(f"{where}{error.get('type')}: {error.get('message')}")
    if states_out is not None:
        write_bundle(states_out, result.states)
        people.print(f"wrote the states of {len(result.states)} nodes to {states_out}")
    if as_json:
        _json_out(result.output)
    else:
        Console().print_json(json.dumps(result.output, default=str))
