"""``somatize-tasks cluster up|down|status|env``: a local cluster kept running in the background.

``up`` starts an embedded Redis and N workers under a run directory, waits
for their heartbeats, records their pids in ``<run dir>/cluster.json`` and
prints the ``export SOMATIZE_...=...`` lines that point a shell at it (on
stdout, and nothing else there, so ``eval "$(somatize-tasks cluster up)"``
works). ``down`` stops every recorded process and removes the run
directory. Processes are named by pid *and* start time, so a stale state
file can never stop an unrelated process.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import tempfile
from pathlib import Path

import click
from redis.exceptions import RedisError
from rich.console import Console

from somatize_tasks.cli import main
from somatize_tasks.cli.common import friendly_errors, split_modules
from somatize_tasks.cli.workers import workers_table
from somatize_tasks.local_cluster import (
    ClusterError,
    LocalCluster,
    SavedCluster,
    save_state,
    worker_specs,
)
from somatize_tasks.local_cluster.cluster import DEMO_NODES, ArgumentSettings
from somatize_tasks.local_cluster.processes import interrupts_raise
from somatize_tasks.workers.registry import Registry

people = Console(stderr=True, highlight=False)


def default_run_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"somatize-cluster-{os.getuid()}"


def _pointer() -> Path:
    """Where ``up`` remembers its run directory, so ``env``/``status``/``down`` find it."""
    default = default_run_dir()
    return default.with_name(default.name + ".last")


def resolve_run_dir(given: Path | None) -> Path:
    """The run directory given, else the one the last ``up`` used (if its cluster is
    still recorded there), else the default."""
    if given is not None:
        return given
    try:
        remembered = Path(_pointer().read_text(encoding="utf-8").strip())
    except OSError:
        return default_run_dir()
    if str(remembered) and SavedCluster.load(remembered) is not None:
        return remembered
    return default_run_dir()


def _forget(run_dir: Path) -> None:
    with contextlib.suppress(OSError):
        if Path(_pointer().read_text(encoding="utf-8").strip()) == run_dir.resolve():
            _pointer().unlink()


run_dir_option = click.option(
    "--run-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    show_default="the last `cluster up`'s, else <tmp>/somatize-cluster-<uid>",
    help="Where the cluster keeps its state, logs, store and caches.",
)


def export_lines(env: dict[str, str]) -> str:
    return "\n".join(f"export {name}={shlex.quote(value)}" for name, value in sorted(env.items()))


@main.group("cluster")
def cluster() -> None:
    """A local cluster (embedded Redis and worker processes) kept running in the background."""


@cluster.command("up")
@click.option(
    "--workers",
    "count",
    type=click.IntRange(1, 32),
    default=3,
    show_default=True,
    help="How many worker processes.",
)
@click.option(
    "--tags",
    default="gpu,cpu",
    show_default=True,
    help="One entry per worker, comma-separated; the last entry repeats. Join several "
    "tags for one worker with '+': gpu+training,cpu.",
)
@click.option(
    "--nodes",
    multiple=True,
    default=DEMO_NODES,
    show_default=True,
    metavar="MODULE[,MODULE]",
    help="Catalog modules every worker imports.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 64),
    default=2,
    show_default=True,
    help="Node slots per worker.",
)
@run_dir_option
@friendly_errors
def up(
    count: int, tags: str, nodes: tuple[str, ...], concurrency: int, run_dir: Path | None
) -> None:
    """Start Redis and the workers, wait for their heartbeats, print the exports to use them."""
    run_dir = run_dir or default_run_dir()
    existing = SavedCluster.load(run_dir)
    if existing is not None and existing.alive():
        raise ClusterError(
            f"a cluster is already running from {run_dir} ({len(existing.alive())} processes). "
            "`somatize-tasks cluster env` prints its settings; `somatize-tasks cluster down` "
            "stops it."
        )
    if existing is not None:  # a stale record: nothing of it runs any more
        shutil.rmtree(run_dir, ignore_errors=True)
    specs = worker_specs(count, tags.split(","), "local")
    local = LocalCluster(
        run_dir, specs, nodes=split_modules(nodes), concurrency=concurrency, tie_to_parent=False
    )
    try:
        with interrupts_raise():
            local.start(lambda message: people.print(f"[green]✓[/green] {message}"))
            save_state(local)
            _pointer().write_text(f"{run_dir.resolve()}\n", encoding="utf-8")
    except BaseException:
        local.stop()
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    people.print(
        f"cluster running from {run_dir}; logs in {run_dir / 'logs'}.\n"
        'Paste these lines into your shell (or: eval "$(somatize-tasks cluster env)"), '
        "then `somatize-tasks cluster down` when you are done:"
    )
    click.echo(export_lines(local.env()))


def _saved(run_dir: Path) -> SavedCluster:
    saved = SavedCluster.load(run_dir)
    if saved is None:
        raise ClusterError(
            f"no cluster recorded in {run_dir}; start one with `somatize-tasks cluster up`"
        )
    return saved


@cluster.command("down")
@run_dir_option
@friendly_errors
def down(run_dir: Path | None) -> None:
    """Stop every process of the cluster and remove its run directory."""
    run_dir = resolve_run_dir(run_dir)
    saved = SavedCluster.load(run_dir)
    if saved is None:
        people.print(f"no cluster recorded in {run_dir}: nothing to stop")
        return
    running = saved.stop()
    left = [p.role for p in saved.processes if p.ref.group_alive() and not p.ref.pid_taken()]
    if left:
        raise ClusterError(f"could not stop {', '.join(left)}; see the logs in {run_dir / 'logs'}")
    shutil.rmtree(run_dir, ignore_errors=True)
    _forget(run_dir)
    people.print(f"stopped {running} process(es); removed {run_dir}")


@cluster.command("env")
@run_dir_option
@friendly_errors
def env(run_dir: Path | None) -> None:
    """Print the export lines for the running cluster."""
    run_dir = resolve_run_dir(run_dir)
    click.echo(export_lines(_saved(run_dir).env))


@cluster.command("status")
@run_dir_option
@friendly_errors
def status(run_dir: Path | None) -> None:
    """Which of the cluster's processes run, and its live workers."""
    run_dir = resolve_run_dir(run_dir)
    saved = _saved(run_dir)
    console = Console(highlight=False)
    for process in saved.processes:
        state = "[green]running[/green]" if process.ref.alive() else "[red]stopped[/red]"
        console.print(
            f"{process.role:<28} pid {process.ref.pid:<8} {state}   log: {process.log_path}"
        )
    fields = {k.removeprefix("SOMATIZE_").lower(): v for k, v in saved.env.items()}
    try:
        live = Registry.from_settings(ArgumentSettings.model_validate(fields)).live()
    except RedisError as exc:
        raise ClusterError(
            f"the cluster's Redis does not answer ({exc}); "
            "`somatize-tasks cluster down`, then `up` again"
        ) from None
    console.print(workers_table(live))
