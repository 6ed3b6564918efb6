"""``somatize-tasks submit``: a plan (or a Soma bundle) started on the live workers.

By default it prints the run id (stdout) and, for people (stderr), where the
plan runs: every node for a small plan, a one-screen summary for a big one
(``--table`` shows every row); ``--quiet`` prints the run id (or with
``--wait`` the output) and nothing else. ``--wait`` follows the run with a
progress bar, then prints its output and any warning the run raised (a loop
that stopped at its cap without a stop signal). With no live worker it
refuses in one line naming the Redis it asked; ``--local`` runs the plan in
this process instead (the Python ``submit_plan`` falls back with a warning).
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

from scheduler import DistributionPlan, PlacementError, WorkerInfo
from somatize_tasks.cli import main
from somatize_tasks.cli.common import friendly_errors
from somatize_tasks.cli.modes import cache_options, mode_options
from somatize_tasks.cli.plan import print_report
from somatize_tasks.cli.runs.local import run_here
from somatize_tasks.cli.runs.options import (
    FINISHED,
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
from somatize_tasks.config.settings import Settings, redacted_url
from somatize_tasks.errors import NoWorkersError
from somatize_tasks.runtime.producer.handle import PlanRun
from somatize_tasks.runtime.producer.submit import submit_plan

#: A placement of more nodes than this is summarised unless ``--table`` is given.
TABLE_MAX_NODES = 40
#: Workers and warnings a summary names before it says how many more there are.
SUMMARY_LINES = 8


def show_distribution(distribution: DistributionPlan, settings: Settings, table: bool) -> None:
    """Where the run's nodes go: the ``plan`` command's report (every node) for a small
    plan or with ``table``, else :func:`print_summary`."""
    if table or len(distribution.assignments) <= TABLE_MAX_NODES:
        names = {a.worker_id: a.worker_name for a in distribution.assignments}
        workers = [WorkerInfo(id=wid, name=name) for wid, name in names.items()]
        print_report(distribution, workers, console=people, via=lambda _: transfer_words(settings))
    else:
        print_summary(distribution, people)


def print_summary(distribution: DistributionPlan, console: Console) -> None:
    """One screen whatever the plan's size: totals, the busiest workers, the first warnings."""
    per_worker = Counter(a.worker_id for a in distribution.assignments)
    names = {a.worker_id: a.worker_name for a in distribution.assignments}
    console.print(
        f"[bold]{len(distribution.assignments):,} nodes[/] on {len(per_worker)} workers, "
        f"{_count(len(distribution.phases), 'phase')}, "
        f"{_count(len(distribution.data_transfers), 'transfer')}",
        highlight=False,
    )
    for worker_id, count in per_worker.most_common(SUMMARY_LINES):
        console.print(f"  {names[worker_id]} ({worker_id}): {count:,} nodes", highlight=False)
    if len(per_worker) > SUMMARY_LINES:
        console.print(f"  ... and {len(per_worker) - SUMMARY_LINES} more workers")
    for warning in distribution.warnings[:SUMMARY_LINES]:
        warn(warning)
    if len(distribution.warnings) > SUMMARY_LINES:
        console.print(f"  ... and {len(distribution.warnings) - SUMMARY_LINES} more warnings")
    console.print("(--table lists every node)", style="dim")


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def transfer_words(settings: Settings) -> str:
    """How a value crosses workers in this deployment: inline when small, else worker to
    worker (``SOMATIZE_TRANSFER``; grants need the message key) or the store."""
    inline = f"inline if ≤ {_size(settings.inline_max_bytes)}"
    if settings.store_kind != "s3":
        return f"{inline}, else shared directory"
    if settings.transfer == "s3" or settings.message_key is None:  # nothing is served
        return f"{inline}, else s3"
    if settings.transfer == "direct":
        return f"{inline}, else worker to worker"
    return f"{inline}, else worker to worker (s3 if that fails)"


def _size(n: int) -> str:
    return f"{n // 1024} KiB" if n >= 1024 and n % 1024 == 0 else f"{n} B"


def no_worker_message(reason: str, settings: Settings) -> str:
    """The one line ``submit`` refuses with: what it found, where it asked, what to do."""
    return (
        f"{reason} in Redis {redacted_url(settings.redis_url)} (key prefix "
        f"'{settings.key_prefix}'); start one (somatize-tasks worker --nodes MODULE), or "
        "pass --local to run the plan in this process"
    )


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


@main.command("submit")
@plan_argument
@input_option
@params_option
@ops_option
@nodes_option
@mode_options
@cache_options
@click.option(
    "--wait", is_flag=True, help="Follow the run with a progress bar and print its output."
)
@click.option(
    "--timeout", type=float, default=None, help="With --wait: give up after this many seconds."
)
@click.option("--json", "as_json", is_flag=True, help="Print only JSON on stdout.")
@click.option("--table", is_flag=True, help="List every node's placement, however many.")
@click.option(
    "-q", "--quiet", is_flag=True, help="Print only the run id (with --wait: the output)."
)
@click.option(
    "--local",
    is_flag=True,
    help="Run the plan here, in this process, instead of on the workers.",
)
@deadline_option
@click.option("--require-workers", is_flag=True, hidden=True, help="The default; kept working.")
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
    table: bool,
    quiet: bool,
    local: bool,
    require_workers: bool,
    deadline_s: float | None,
    run_options: dict[str, Any],
) -> None:
    """Submit PLAN.json to the live workers (a plan, or {"plan", "predecessors"}), or a
    Soma checkpoint bundle MODEL.zip (run forward with its states)."""
    plan, inputs = read_run_files(plan_file, input_file, params_file, ops_file, nodes)
    if local:
        run_here(plan, inputs, run_options, as_json=as_json, deadline_s=deadline_s, quiet=quiet)
        return
    settings = Settings.from_env()
    run = _start(plan, inputs, run_options, settings, deadline_s, quiet)
    if not quiet:
        people.print(f"run [bold]{run.id}[/bold]")
        show_distribution(run.distribution, settings, table)
    if not wait:
        if as_json:
            json_out({"run_id": run.id, "distribution": run.distribution.model_dump(mode="json")})
            return
        if not quiet:
            people.print(f"follow it with: somatize-tasks status {run.id}")
        click.echo(run.id)  # stdout: RUN=$(somatize-tasks submit plan.json)
        return
    try:
        if not quiet:
            follow(run, timeout)
        output = run.wait(timeout=timeout if quiet else 5)
    except KeyboardInterrupt:
        _cancel_on_second_interrupt(run)
    if not quiet:
        for warning in run.warnings[len(run.distribution.warnings) :]:
            warn(warning)  # raised while it ran (the placement's were shown above)
    if as_json or quiet:
        json_out(output)
    else:
        people.print("[bold green]output[/bold green]")
        Console().print_json(json.dumps(output, default=str))


def _start(
    plan: Any,
    inputs: dict[str, Any],
    run_options: dict[str, Any],
    settings: Settings,
    deadline_s: float | None,
    quiet: bool,
) -> PlanRun:
    """``submit_plan`` on the workers only; its refusals as one line each."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            run = submit_plan(
                plan,
                **inputs,
                **run_options,
                require_workers=True,
                settings=settings,
                deadline_s=deadline_s,
            )
        except NoWorkersError as exc:
            raise click.ClickException(no_worker_message(exc.reason, settings)) from None
        except PlacementError as exc:
            raise click.ClickException(
                f"{exc.problem}. Start a worker that satisfies the target, or free capacity on one."
            ) from None
    if not quiet:
        for warning in caught:
            warn(str(warning.message))
    return run


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
    shown = dict(per_worker.most_common(SUMMARY_LINES))  # one screen, however many workers
    with Progress(*columns, console=people, transient=False) as bar:
        overall = bar.add_task("[bold]all nodes", total=run.progress().total)
        lanes = {w: bar.add_task(f"  {w}", total=n) for w, n in sorted(shown.items())}
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
