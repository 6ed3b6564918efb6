"""``somatize-tasks study``: search a plan's parameters on the cluster, prune, resume.

::

    somatize-tasks study plan.json --space space.json --trials 40 --objective evaluate \\
        --direction minimize [--strategy bayesian] [--parallel 8] [--pruner median:2] \\
        [--seeds 1,2,3] [--record tune.study.json] [--resume] [--json]

One line per finished trial goes to stderr; the best trial (its parameters
and value) is printed last. ``--json`` prints only the study as JSON, the
best trial last. The study is kept in ``--record`` after every trial
(default ``<plan>.study.json``); ``--resume`` goes on from it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from somatize_tasks.cli import main
from somatize_tasks.cli.common import friendly_errors, import_node_modules, load_json_file
from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import StudyError
from somatize_tasks.study.api import start_study
from somatize_tasks.study.record import TrialRecord

people = Console(stderr=True)


@main.command("study")
@click.argument("plan_file", metavar="PLAN.json", type=click.Path(dir_okay=False))
@click.option("--space", "space_file", type=click.Path(dir_okay=False), help="Search space JSON.")
@click.option("--trials", "n_trials", type=click.IntRange(min=1), help="Configurations to try.")
@click.option("--objective", metavar="NODE[.metric]", help="What to optimize.")
@click.option("--direction", type=click.Choice(["minimize", "maximize"]), default="minimize")
@click.option("--strategy", type=click.Choice(["bayesian", "random", "grid"]), default="bayesian")
@click.option("--parallel", type=click.IntRange(min=1), default=None, help="Trials at once.")
@click.option(
    "--pruner",
    metavar="median[:WARMUP[:STARTUP]]|percentile:PCT[:WARMUP[:STARTUP]]",
    default=None,
    help="Stop trials whose reported objective trails the others at the same step.",
)
@click.option("--seeds", default=None, metavar="1,2,3", help="Run each configuration per seed.")
@click.option("--seed", type=int, default=None, help="The sampler's seed (reproducible).")
@click.option("--record", "record_file", type=click.Path(dir_okay=False), default=None)
@click.option("--resume", is_flag=True, help="Go on with the study kept in --record.")
@click.option("--input", "input_file", type=click.Path(dir_okay=False), default=None)
@click.option("--params", "params_file", type=click.Path(dir_okay=False), default=None)
@click.option("--ops", "ops_file", type=click.Path(dir_okay=False), default=None)
@click.option("--cache", type=click.Choice(["on", "off"]), default="on")
@click.option("--nodes", multiple=True, metavar="MODULE", help="Catalog modules to import.")
@click.option("--json", "as_json", is_flag=True, help="Print only the study, as JSON.")
@friendly_errors
def study(plan_file: str, **given: Any) -> None:
    """Sample, run and prune trials of PLAN.json on the live workers."""
    import_node_modules(given.pop("nodes"))
    as_json = given.pop("as_json")
    record = Path(given.pop("record_file") or Path(plan_file).with_suffix(".study.json").name)
    options = _options(plan_file, given)
    people.print(f"study record: {record}")
    handle = start_study(
        None if options["resume"] else load_json_file(plan_file, "plan"),
        record=record,
        settings=Settings.from_env(),
        on_trial=_show,
        **options,
    )
    people.print(f"study {handle.study_id}: {handle.total} trials")
    best = handle.wait()
    trials = handle.trials
    if as_json:
        click.echo(json.dumps(_summary(handle.study_id, record, trials, best), indent=1))
        return
    states = {
        s: sum(1 for t in trials if t["state"] == s) for s in ("completed", "pruned", "failed")
    }
    people.print(", ".join(f"{n} {s}" for s, n in states.items()))
    if best is None:
        raise click.ClickException("no trial completed: no best trial")
    click.echo(
        f"best trial {best['number']}: value {best['value']} params {json.dumps(best['params'])}"
    )


def _options(plan_file: str, given: dict[str, Any]) -> dict[str, Any]:
    resume = given.pop("resume")
    options: dict[str, Any] = {
        "resume": resume,
        "parallel": given.pop("parallel"),
        "input": _json_file(given.pop("input_file"), "input"),
        "params": _json_file(given.pop("params_file"), "params"),
        "ops": _json_file(given.pop("ops_file"), "ops"),
    }
    if resume:
        return options
    space_file = given.pop("space_file")
    if space_file is None or given["n_trials"] is None or given["objective"] is None:
        raise click.UsageError("a new study needs --space, --trials and --objective")
    options.update(
        space=load_json_file(space_file, "space"),
        n_trials=given["n_trials"],
        objective=given["objective"],
        direction=given["direction"],
        strategy=given["strategy"],
        pruning=parse_pruner(given["pruner"]),
        seeds=[int(s) for s in given["seeds"].split(",")] if given["seeds"] else [],
        seed=given["seed"],
        cache=given["cache"],
        name=Path(plan_file).stem,
    )
    return options


def parse_pruner(text: str | None) -> dict[str, Any] | None:
    """``median:2`` -> ``{"type": "median", "warmup": 2}``; ``percentile:25:1:3`` ..."""
    if text is None:
        return None
    kind, *numbers = text.split(":")
    try:
        values = [float(n) for n in numbers]
    except ValueError:
        raise StudyError(f"--pruner {text!r}: the numbers after the kind must be numbers") from None
    if kind == "median" and len(values) <= 2:
        names = ["warmup", "startup"]
    elif kind == "percentile" and 1 <= len(values) <= 3:
        names = ["percentile", "warmup", "startup"]
    else:
        raise StudyError(
            f"--pruner {text!r}: use median[:WARMUP[:STARTUP]] or percentile:PCT[:WARMUP[:STARTUP]]"
        )
    spec: dict[str, Any] = {"type": kind}
    for name, value in zip(names, values, strict=False):
        spec[name] = value if name == "percentile" else int(value)
    return spec


def _json_file(path: str | None, what: str) -> Any:
    return None if path is None else load_json_file(path, what)


def _show(trial: TrialRecord) -> None:
    value = "" if trial.value is None else f" {trial.value:.6g}"
    extra = f" (as trial {trial.repeat_of})" if trial.repeat_of is not None else ""
    extra += f": {trial.error}" if trial.error else ""
    people.print(f"trial {trial.number} {trial.state}{value} {json.dumps(trial.params)}{extra}")


def _summary(
    study_id: str, record: Path, trials: list[dict[str, Any]], best: dict[str, Any] | None
) -> dict[str, Any]:
    return {
        "study_id": study_id,
        "record": str(record),
        "trials": len(trials),
        "completed": sum(1 for t in trials if t["state"] == "completed"),
        "pruned": sum(1 for t in trials if t["state"] == "pruned"),
        "failed": sum(1 for t in trials if t["state"] == "failed"),
        "best_trial": best,
    }
