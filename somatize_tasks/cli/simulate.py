"""``somatize-tasks simulate``: size a cluster on paper (:mod:`somatize_tasks.sizing`)."""

from __future__ import annotations

from pathlib import Path

import click
from redis import Redis
from redis.exceptions import RedisError

from somatize_tasks.cli import main
from somatize_tasks.sizing.calibrate import calibrate
from somatize_tasks.sizing.simulate import COSTS_FILE, Cluster, Costs, predict


@main.command("simulate")
@click.option("--workers", type=int, required=True, help="Workers heartbeating.")
@click.option("--plan-size", type=int, default=1, show_default=True, help="Nodes per run.")
@click.option("--runs", type=int, default=0, show_default=True, help="Runs active at once.")
@click.option(
    "--parallel",
    type=int,
    default=None,
    help="Nodes of one run ready at once (default: the whole plan).",
)
@click.option("--node-s", type=float, default=1.0, show_default=True, help="Mean node duration.")
@click.option("--slots", type=int, default=4, show_default=True, help="Slots per worker.")
@click.option(
    "--interval", type=float, default=2.0, show_default=True, help="Heartbeat interval (s)."
)
@click.option(
    "--broker-elsewhere",
    is_flag=True,
    help="Celery's broker is not this Redis (SOMATIZE_BROKER_URL): leave "
    "Celery's own polling out of Redis' load.",
)
@click.option(
    "--costs",
    "costs_path",
    type=click.Path(path_type=Path),
    default=None,
    help=f"Measured costs (JSON). Default: the bundled {COSTS_FILE.name}.",
)
@click.option(
    "--calibrate",
    "redis_url",
    default=None,
    metavar="REDIS_URL",
    help="Measure the registry and reaper costs on this scratch Redis first "
    "(it is FLUSHED), keeping the dispatch costs of --costs.",
)
def simulate(
    workers: int,
    plan_size: int,
    runs: int,
    parallel: int | None,
    node_s: float,
    slots: int,
    interval: float,
    broker_elsewhere: bool,
    costs_path: Path | None,
    redis_url: str | None,
) -> None:
    """Predict Redis CPU, memory and p99 dispatch delay for a cluster."""
    costs = Costs.load(costs_path or (COSTS_FILE if COSTS_FILE.exists() else None))
    if redis_url:
        try:
            costs = calibrate(Redis.from_url(redis_url), costs)
        except (RedisError, ValueError) as exc:
            raise click.ClickException(f"cannot calibrate on {redis_url}: {exc}") from None
    cluster = Cluster(
        workers=workers,
        plan_size=plan_size,
        runs=runs,
        parallel=parallel,
        node_s=node_s,
        slots=slots,
        interval_s=interval,
        celery_workers=0 if broker_elsewhere else None,
    )
    click.echo(
        f"{workers} workers, {runs} run(s) of {plan_size} node(s), costs: {costs.measured_on}"
    )
    click.echo(predict(cluster, costs).describe())
