"""The ``somatize-tasks`` command line: one module per command group.

Each command module registers itself on :data:`main` when imported; the list
below is the whole command set.
"""

from __future__ import annotations

import importlib

import click

from somatize_tasks.cli.common import FriendlyGroup


@click.group(cls=FriendlyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="somatize-tasks")
def main() -> None:
    """Route Soma execution plans across Celery workers."""


_COMMAND_MODULES = (
    "plan",
    "workers",
    "modes",
    "runs",
    "maintenance",
    "demo",
    "observe",
    "cluster",
    "simulate",
    "study",
)

for _name in _COMMAND_MODULES:
    importlib.import_module(f"somatize_tasks.cli.{_name}")
