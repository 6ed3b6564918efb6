"""``somatize-tasks plan FILE``: place a plan on workers and show the result.

FILE may also be a Soma checkpoint bundle (``model.zip``): its topology,
compiled as Soma compiles it, is placed (give the workers with ``--workers``).

FILE holds ``{"plan": ..., "workers": [...], "differentiable_nodes": [...],
"predecessors": {...}}`` (a *schedule input*; ``predecessors`` is optional:
the plan's data graph, whose edges the transfers then follow), or a plan
(bare, or as ``{"plan": ..., "predecessors": ...}``) with ``--workers WORKERS.json``.
With ``--live`` the plan is placed on the live workers, read from Redis.
The default output is a readable report (per worker: its nodes in execution
order with phase and reason, transfers in and out; the phases; warnings);
``--json`` prints exactly the ``DistributionPlan`` JSON and ``--mermaid`` a
Mermaid flowchart of the placed plan. Bad input is one line on stderr and
exit status 1, never a traceback.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from scheduler import (
    DataTransfer,
    DistributionPlan,
    ExecutionPlan,
    PlacementError,
    WorkerInfo,
    data_edges,
    load_plan_document,
    load_workers,
    schedule,
)
from somatize_tasks.authoring.bundle import is_bundle_path, read_soma_bundle
from somatize_tasks.cli import main
from somatize_tasks.cli.common import friendly_errors, load_json_file
from somatize_tasks.config.settings import Settings, redacted_url
from somatize_tasks.workers.registry import Registry

EXAMPLE = "pipeline.schedule-input.json"
_INPUT_KEYS = {"plan", "workers", "differentiable_nodes", "predecessors"}


@dataclass(frozen=True)
class ScheduleInput:
    """What ``schedule()`` needs, read from the command's files."""

    plan: ExecutionPlan
    workers: list[WorkerInfo]
    differentiable_nodes: list[str]
    predecessors: dict[str, list[str]] | None = None


@main.command("plan")
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--workers",
    "workers_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Worker list (JSON) for a bare plan, or to replace the FILE's workers.",
)
@click.option(
    "--live",
    is_flag=True,
    help="Place on the live workers (read from Redis, SOMATIZE_REDIS_URL), not a file's.",
)
@click.option("--example", is_flag=True, help=f"Use the bundled example ({EXAMPLE}).")
@click.option("--json", "as_json", is_flag=True, help="Print the DistributionPlan JSON only.")
@click.option("--mermaid", is_flag=True, help="Print a Mermaid flowchart of the placement.")
@click.option(
    "--allow-local-fallback",
    is_flag=True,
    help="When a Remote cannot be placed, print an empty plan with a warning instead of failing.",
)
@friendly_errors
def plan_command(
    *,
    file: Path | None,
    workers_file: Path | None,
    live: bool,
    example: bool,
    as_json: bool,
    mermaid: bool,
    allow_local_fallback: bool,
) -> None:
    """Place the plan in FILE on workers and show who runs what, and why."""
    if as_json and mermaid:
        raise click.UsageError("--json and --mermaid are alternatives; pick one")
    if (file is None) == (not example):
        raise click.UsageError("give a FILE or --example (not both)")
    if live and workers_file is not None:
        raise click.UsageError("--live and --workers are alternatives; pick one")
    try:
        if file is not None and is_bundle_path(file):
            document = read_soma_bundle(file).built().to_wire()
        else:
            document = load_json_file(file, "plan") if file is not None else _example_document()
        workers = load_json_file(workers_file, "workers") if workers_file else None
        if live:
            workers = live_workers_or_fail(Settings.from_env())
        given = _schedule_input(document, workers, file)
        result = schedule(
            given.plan,
            given.workers,
            given.differentiable_nodes,
            allow_local_fallback=allow_local_fallback,
            predecessors=given.predecessors,
        )
    except PlacementError as exc:
        raise click.ClickException(
            f"{exc.problem}. Start a worker that satisfies the target, free capacity on one, "
            "or pass --allow-local-fallback to print an empty plan instead."
        ) from None
    if as_json:
        click.echo(result.model_dump_json(indent=2))
    elif mermaid:
        click.echo(to_mermaid(given.plan, result, given.workers, given.predecessors))
    else:
        print_report(result, given.workers)


# --- reading input -------------------------------------------------------------------------


def live_workers_or_fail(settings: Settings) -> list[dict[str, Any]]:
    """The live workers' WorkerInfo JSON; none is one line naming the Redis asked."""
    live = Registry.from_settings(settings).live()
    if not live:
        raise click.ClickException(
            f"no live worker in Redis {redacted_url(settings.redis_url)} (key prefix "
            f"'{settings.key_prefix}'): start one, or place on a file's with --workers"
        )
    return [w.info.model_dump(mode="json") for w in live]


def _example_document() -> Any:
    text = resources.files("somatize_tasks.examples").joinpath(EXAMPLE).read_text("utf-8")
    return json.loads(text)


def _schedule_input(document: Any, workers: Any, file: Path | None) -> ScheduleInput:
    """A schedule input document, or a bare plan plus a worker list."""
    source = str(file) if file is not None else EXAMPLE
    if isinstance(document, dict) and "plan" in document:
        unknown = sorted(set(document) - _INPUT_KEYS)
        if unknown:
            raise click.ClickException(
                f"{source}: unknown key(s) {', '.join(map(repr, unknown))}; "
                f"a schedule input has {', '.join(sorted(_INPUT_KEYS))}"
            )
        if workers is None:
            workers = document.get("workers")
        differentiable = document.get("differentiable_nodes", [])
        document = {"plan": document["plan"], "predecessors": document.get("predecessors")}
    else:
        differentiable = []
    if workers is None:
        raise click.ClickException(
            f"{source} holds a bare plan: give the workers with --workers WORKERS.json"
        )
    if not isinstance(differentiable, list) or not all(isinstance(n, str) for n in differentiable):
        raise click.ClickException(f"{source}: differentiable_nodes must be a list of node ids")
    # parsed JSON: a str here is a variant name ("Empty"), never JSON text
    loaded = load_plan_document(document)
    return ScheduleInput(loaded.plan, load_workers(workers), differentiable, loaded.predecessors)


# --- the readable report ---------------------------------------------------------------------


def print_report(
    result: DistributionPlan,
    workers: list[WorkerInfo],
    console: Console | None = None,
    via: Callable[[DataTransfer], str] | None = None,
) -> None:
    """Per worker its nodes in execution order, then phases, transfers and warnings.

    ``via`` words each transfer's "via" cell; by default the scheduler's
    ``transfer_type``. A run knows better (its store may be a directory, a
    small value goes inline), so ``submit`` passes its own.
    """
    via = via or (lambda t: t.transfer_type)
    console = console or Console(highlight=False)
    phase_of = {n: p.phase_index for p in result.phases for n in p.node_ids}
    moves_in: dict[str, int] = defaultdict(int)
    moves_out: dict[str, int] = defaultdict(int)
    for transfer in result.data_transfers:
        moves_in[transfer.to_worker] += 1
        moves_out[transfer.from_worker] += 1
    console.print(
        f"[bold]{len(result.assignments)} nodes[/] on "
        f"{len({a.worker_id for a in result.assignments})} of {len(workers)} workers, "
        f"{_count(len(result.phases), 'phase')}, {_count(len(result.data_transfers), 'transfer')}"
    )
    for worker in workers:
        rows = [a for a in result.assignments if a.worker_id == worker.id]
        if not rows:
            continue
        table = Table(
            title=f"{worker.name} ({worker.id}): {_count(len(rows), 'node')}, "
            f"{_count(moves_in[worker.id], 'transfer')} in, {moves_out[worker.id]} out",
            title_justify="left",
        )
        for column in ("phase", "node", "reason"):
            table.add_column(column)
        for row in rows:
            table.add_row(
                f"{phase_of[row.node_id]} {row.phase.describe()}", row.node_id, row.reason
            )
        console.print(table)
    if result.phases:
        phases = Table(title="Phases, in execution order", title_justify="left")
        for column in ("#", "type", "nodes", "workers"):
            phases.add_column(column)
        for phase in result.phases:
            phases.add_row(
                str(phase.phase_index),
                phase.phase_type.describe(),
                ", ".join(phase.node_ids),
                ", ".join(phase.worker_ids),
            )
        console.print(phases)
    if result.data_transfers:
        moves = Table(title="Data transfers", title_justify="left")
        for column in ("from", "to", "via"):
            moves.add_column(column)
        for t in result.data_transfers:
            moves.add_row(
                f"{t.from_node} @ {t.from_worker}", f"{t.to_node} @ {t.to_worker}", via(t)
            )
        console.print(moves)
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning}")


# --- Mermaid ---------------------------------------------------------------------------------


def to_mermaid(
    plan: ExecutionPlan,
    result: DistributionPlan,
    workers: list[WorkerInfo],
    predecessors: dict[str, list[str]] | None = None,
) -> str:
    """The plan as a Mermaid flowchart: a box per worker holding its nodes, an
    arrow per data edge, transfers drawn thick and coloured."""
    ids = {node_id: f"n{i}" for i, node_id in enumerate(plan.node_ids())}
    where = result.worker_of()
    lines = ["flowchart LR"]
    lines += [f"    %% warning: {_label(w)}" for w in result.warnings]
    for index, worker in enumerate(workers):
        nodes = [a.node_id for a in result.assignments if a.worker_id == worker.id]
        if not nodes:
            continue
        lines.append(f'    subgraph w{index}["{_label(worker.name)} ({_label(worker.id)})"]')
        lines += [f'        {ids[n]}["{_label(n)}"]' for n in nodes]
        lines.append("    end")
    lines += [f'    {ids[n]}["{_label(n)}"]' for n in ids if n not in where]
    moved = {(t.from_node, t.to_node): t.transfer_type for t in result.data_transfers}
    thick: list[str] = []
    for number, (source, target) in enumerate(data_edges(plan, predecessors)):
        via = moved.get((source, target))
        if via is None:
            lines.append(f"    {ids[source]} --> {ids[target]}")
        else:
            lines.append(f"    {ids[source]} == {via} ==> {ids[target]}")
            thick.append(str(number))
    if thick:
        lines.append(f"    linkStyle {','.join(thick)} stroke:#d9480f,stroke-width:3px")
    return "\n".join(lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _label(text: str) -> str:
    """Text safe inside a Mermaid ``"..."`` label."""
    return text.replace('"', "#quot;").replace("\n", " ")
