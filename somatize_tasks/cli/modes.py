"""Fit and forward on the command line: ``--mode``, ``--labels``, ``--states-from``,
and ``somatize-tasks states export RUN_ID`` to keep a fit's states in a file
(or, with ``--bundle model.zip``, in a Soma checkpoint bundle).

``--states-from`` takes a fit run's id or a states file (written by
``states export`` or by ``run --states-out``). Labels are a JSON file, or
a ``.npy`` array (read without pickle).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import numpy as np

from somatize_tasks.cli import main
from somatize_tasks.cli.common import (
    friendly_errors,
    import_node_modules,
    load_json_file,
    split_modules,
)
from somatize_tasks.config.settings import Settings
from somatize_tasks.runtime.producer.bundle_export import export_soma_bundle
from somatize_tasks.runtime.producer.fitted_states import looks_like_file, read_bundle, write_bundle
from somatize_tasks.runtime.producer.handle import PlanRun

F = TypeVar("F", bound=Callable[..., Any])


def mode_options(command: F) -> F:
    """Add ``--mode``, ``--labels`` and ``--states-from``; the command receives them
    as one ``run_options`` dict of ``submit_plan`` / ``run_local`` keywords."""

    @click.option(
        "--mode",
        type=click.Choice(["fit", "forward"]),
        default=None,
        help="fit: trainable filters learn (with --labels) and the run keeps their states; "
        "forward: they use --states-from. Default: forward with --states-from or a "
        "Stream, else fit.",
    )
    @click.option(
        "--labels",
        "labels_file",
        type=click.Path(dir_okay=False),
        help="Labels y for a fit: a JSON file or a .npy array.",
    )
    @click.option(
        "--states-from",
        "states_from",
        metavar="RUN_ID|FILE",
        help="The states a forward run uses: a fit run's id, or a states file.",
    )
    @functools.wraps(command)
    def wrapper(
        *args: Any,
        mode: str | None,
        labels_file: str | None,
        states_from: str | None,
        **kwargs: Any,
    ) -> Any:
        options: dict[str, Any] = {"mode": mode, "states_from": states_from}
        if labels_file is not None:
            options["y"] = read_labels(labels_file)
        return command(*args, run_options=options, **kwargs)

    return wrapper  # type: ignore[return-value]


def cache_options(command: F) -> F:
    """Add ``--cache on|off`` and ``--seed N``; the command receives them in
    ``run_options`` (after :func:`mode_options`, which makes that dict)."""

    @click.option(
        "--cache",
        type=click.Choice(["on", "off"]),
        default=None,
        help="Whether nodes use the content cache every worker shares "
        "(default: SOMATIZE_CONTENT_CACHE, on).",
    )
    @click.option(
        "--seed",
        type=int,
        default=None,
        help="The run's experiment seed: in every cache key, and read by nodes "
        "with somatize_tasks.current_seed().",
    )
    @functools.wraps(command)
    def wrapper(*args: Any, cache: str | None, seed: int | None, **kwargs: Any) -> Any:
        kwargs["run_options"] = {**kwargs.get("run_options", {}), "cache": cache, "seed": seed}
        return command(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def read_labels(path: str) -> Any:
    """Labels from a JSON file, or a ``.npy`` file (never unpickled)."""
    if not path.endswith(".npy"):
        return load_json_file(path, "labels")
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"cannot read labels file '{path}': {exc}") from None


def local_states(states_from: str | None) -> dict[str, Any] | None:
    """States for a run in this process: a states file, or a fit run read from Redis."""
    if states_from is None:
        return None
    if looks_like_file(states_from):
        return read_bundle(states_from)
    return PlanRun.attach(states_from, Settings.from_env()).states()


@main.group("states")
def states_group() -> None:
    """Fitted states: keep a fit run's states in a file for later forward runs."""


@states_group.command("export")
@click.argument("run_id")
@click.option(
    "-o",
    "--output",
    "output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where to write the states file (default: RUN_ID.states.json).",
)
@click.option(
    "--bundle",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write a Soma checkpoint bundle (model.zip: topology and states) that Soma's "
    "Graph.load reads, instead of a states file.",
)
@click.option(
    "--nodes",
    multiple=True,
    metavar="MODULE[,MODULE]",
    help="With --bundle: catalog modules that name the nodes' classes.",
)
@friendly_errors
def export_states(
    run_id: str, output: Path | None, bundle: Path | None, nodes: tuple[str, ...]
) -> None:
    """Write the states fit run RUN_ID learned to a states file (JSON, no pickle),
    or with --bundle to a Soma checkpoint bundle."""
    run = PlanRun.attach(run_id, Settings.from_env())
    if bundle is not None:
        if output is not None:
            raise click.UsageError("-o and --bundle are alternatives; pick one")
        import_node_modules(split_modules(nodes))
        written = export_soma_bundle(run, bundle)
        click.echo(
            f"wrote a Soma bundle with the states of {len(written)} nodes "
            f"({', '.join(sorted(written))}) to {bundle}"
        )
        return
    states = run.states()
    if not states:
        raise click.ClickException(f"run {run_id} kept no states (was it run with --mode fit?)")
    target = output or Path(f"{run_id}.states.json")
    write_bundle(target, states, run_id)
    click.echo(f"wrote the states of {len(states)} nodes ({', '.join(sorted(states))}) to {target}")
