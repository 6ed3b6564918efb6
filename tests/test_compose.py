"""docker-compose.yml and the Dockerfile, kept right by test (Docker cannot run here).

Every command of a service built from this repository must be a real entry
point of the package: a ``somatize-tasks`` subcommand whose options parse,
or ``celery -A somatize_tasks <command>`` with a command Celery has. Every
``SOMATIZE_*`` name must be a real setting.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from celery.bin.base import CLIContext
from celery.bin.celery import celery as celery_cli

import somatize_tasks
from somatize_tasks.cli import main
from somatize_tasks.config.settings import Settings

REPO = Path(__file__).resolve().parents[1]
COMPOSE: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
OURS = sorted(
    name for name, svc in SERVICES.items() if svc.get("image", "").startswith("somatize-tasks")
)
SETTINGS = {f"SOMATIZE_{name.upper()}" for name in Settings.model_fields}
APP_WORKDIR = "/app"


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def _check_somatize_command(argv: list[str]) -> click.Context:
    """Parse ``somatize-tasks ...`` exactly as click would, down to the subcommand."""
    parent = click.Context(main, info_name="somatize-tasks")
    command = main.get_command(parent, argv[1])
    assert command is not None, f"somatize-tasks has no subcommand {argv[1]!r}"
    ctx = command.make_context(argv[1], list(argv[2:]), parent=parent)
    if argv[1] == "worker":  # options it does not know go to `celery worker`: check them there
        _celery_parse("worker", list(ctx.params["celery_args"]))
    return ctx


def _celery_subcommand(name: str) -> click.Command:
    command = celery_cli.get_command(click.Context(celery_cli, info_name="celery"), name)
    assert command is not None, f"celery has no command {name!r}"
    return command


def _celery_parse(name: str, args: list[str]) -> None:
    """Parse a celery subcommand's arguments with the app in the context, as `celery -A` does."""
    parent = click.Context(
        celery_cli,
        info_name="celery",
        obj=CLIContext(app=somatize_tasks.app, no_color=True, workdir=None),
    )
    _celery_subcommand(name).make_context(name, args, parent=parent)


def _check_celery_command(argv: list[str]) -> None:
    assert argv[1:3] == ["-A", "somatize_tasks"], argv
    assert importlib.import_module("somatize_tasks").app is somatize_tasks.app
    command = _celery_subcommand(argv[3])
    if argv[3] == "inspect":
        assert argv[4] == "ping", argv
    if argv[3] != "flower":  # flower parses its own options (tornado), not click's
        _celery_parse(argv[3], list(argv[4:]))
    else:
        assert command is not None


def _commands(name: str) -> list[list[str]]:
    service = SERVICES[name]
    found = [service["command"]]
    test = (service.get("healthcheck") or {}).get("test")
    if test and test[0] == "CMD":
        found.append(test[1:])
    elif test and test[0] == "CMD-SHELL":
        found.append(test[1].split())
    return found


def test_the_services_a_deployment_needs_are_there() -> None:
    assert {"redis", "minio", "flower", "worker-gpu", "worker-cpu", "producer"} <= set(SERVICES)
    assert set(OURS) == {"flower", "worker-gpu", "worker-cpu", "producer"}


@pytest.mark.parametrize("name", OURS)
def test_each_command_is_a_real_entry_point(name: str) -> None:
    for argv in _commands(name):
        assert isinstance(argv, list) and argv, f"{name}: use the exec (list) form"
        if argv[0] == "somatize-tasks":
            _check_somatize_command(argv)
        elif argv[0] == "celery":
            _check_celery_command(argv)
        else:
            pytest.fail(f"{name}: {argv[0]!r} is not an entry point of this package")


@pytest.mark.parametrize("name", OURS)
def test_each_somatize_variable_is_a_real_setting(name: str) -> None:
    env = _environment(SERVICES[name])
    names = {k for k in env if k.startswith("SOMATIZE_")}
    assert names, f"{name} gets no settings"
    assert names <= SETTINGS, f"{name}: not settings: {sorted(names - SETTINGS)}"
    # The values that are not ${...} substitutions must validate as settings too.
    literal = {
        k.removeprefix("SOMATIZE_").lower(): v
        for k, v in env.items()
        if k in names and "${" not in v
    }
    Settings.model_validate(literal)


def test_workers_share_the_redis_and_the_bucket_the_bucket_job_creates() -> None:
    envs = [_environment(SERVICES[name]) for name in OURS]
    assert {e["SOMATIZE_REDIS_URL"] for e in envs} == {"redis://redis:6379/0"}
    buckets = {e["SOMATIZE_S3_BUCKET"] for e in envs}
    assert len(buckets) == 1
    bucket = buckets.pop()
    creators = [
        s
        for s in SERVICES.values()
        if re.search(
            rf"mc mb .*/{bucket}\b", " ".join(str(part) for part in s.get("command") or [])
        )
    ]
    assert creators, "no service creates the bucket"
    assert {e["SOMATIZE_S3_ENDPOINT_URL"] for e in envs} == {"http://minio:9000"}


def test_worker_tags_and_scaling() -> None:
    gpu = _check_somatize_command(SERVICES["worker-gpu"]["command"])
    cpu_service = SERVICES["worker-cpu"]
    cpu = _check_somatize_command(cpu_service["command"])
    assert gpu.params["worker_tags"] == "gpu" and cpu.params["worker_tags"] == "cpu"
    # Scalable: no fixed worker id, container name, hostname or published port.
    assert cpu.params["worker_id"] is None
    assert not {"container_name", "hostname", "ports"} & set(cpu_service)
    assert "SOMATIZE_WORKER_ID" not in _environment(cpu_service)


def test_flower_asks_for_a_password() -> None:
    flower = SERVICES["flower"]
    auth = _environment(flower).get("FLOWER_BASIC_AUTH") or " ".join(flower["command"])
    assert re.search(r"\w+:\S+", auth) and "FLOWER_UNAUTHENTICATED_API" not in _environment(flower)


def test_the_producer_submits_the_bundled_example_and_waits() -> None:
    producer = SERVICES["producer"]
    ctx = _check_somatize_command(producer["command"])
    assert producer["command"][1] == "submit" and ctx.params["wait"]
    for option in ("plan_file", "params_file"):
        assert (REPO / ctx.params[option]).is_file(), ctx.params[option]
    assert set(producer["depends_on"]) >= {"worker-gpu", "worker-cpu"}


def test_the_dockerfile_installs_the_package_the_services_run() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert f"WORKDIR {APP_WORKDIR}" in dockerfile
    for path in ("pyproject.toml", "scheduler", "somatize_tasks"):
        assert re.search(rf"^COPY .*\b{path}\b", dockerfile, flags=re.M), path
        assert (REPO / path).exists()
    assert re.search(r"^RUN pip install \.", dockerfile, flags=re.M)
    for name in OURS:
        assert SERVICES[name].get("build") in (".", {"context": "."}), name
