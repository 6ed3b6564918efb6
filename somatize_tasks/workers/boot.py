"""What happens when a worker process starts, however it was started.

``somatize-tasks worker`` and plain ``celery -A somatize_tasks worker``
both end here, so the environment alone is enough for the second:

- the worker consumes its own queue (``somatize.w.<worker_id>``) and, unless
  ``-Q`` says otherwise, nothing else;
- it takes the node name ``<worker_id>@<host>`` unless ``-n`` was given, so
  Flower lists workers by their somatize ids;
- it refuses to start under an id another live process heartbeats as
  (:mod:`somatize_tasks.workers.identity`), with one line saying what to do;
- it imports its catalog modules (``Settings.nodes``) in the main process,
  before the pool forks, and records its id in the catalog for errors;
- the heartbeat bootstep registers it while its pool runs;
- it says once whether it checks message signatures (``SOMATIZE_MESSAGE_KEY``):
  without a key, anyone who can write to Redis can make it run anything;
- its start-up banner shows the broker without a password mask when there is
  no password (kombu prints ``redis://:**@`` either way) and lists the
  catalog it loaded, so a wrong ``--nodes`` shows before the first task.

The handler is connected when this module is imported, which the package's
``__init__`` does, so every somatize app's workers get it.
"""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import Callable
from typing import Any

from celery.signals import celeryd_after_setup, celeryd_init
from redis.exceptions import RedisError

from somatize_tasks.catalog.entries import default_catalog, load_catalog_modules
from somatize_tasks.config.keys import queue_name
from somatize_tasks.config.settings import Settings, redacted_url
from somatize_tasks.errors import DuplicateWorkerIdError
from somatize_tasks.messaging.celery_app import SomatizeCelery
from somatize_tasks.messaging.kombu_compat import guard_restore_on_close, unacked_on_redis_clock
from somatize_tasks.messaging.replay import instance_id
from somatize_tasks.store import key_part
from somatize_tasks.store.gc import sweep_temp_files
from somatize_tasks.workers.identity import check_unique
from somatize_tasks.workers.registry import Registry

log = logging.getLogger(__name__)


@celeryd_init.connect(weak=False)
def _on_worker_init(sender: str, instance: Any, options: dict[str, Any], **_: Any) -> None:
    app = instance.app
    if not isinstance(app, SomatizeCelery):
        return
    guard_restore_on_close()
    settings = app.somatize_settings
    refuse_a_duplicate_id(settings)
    unacked_on_redis_clock(settings)
    own_queue = queue_name(settings.worker_id)
    if not options.get("queues"):
        app.amqp.queues.select([own_queue])  # with -Q, HeartbeatStep adds it to theirs
    if str(instance.hostname).startswith("celery@"):
        instance.hostname = f"{settings.worker_id}@{socket.gethostname()}"
    default_catalog.worker_id = settings.worker_id
    default_catalog.allowed_modules = tuple(settings.allowed_modules)
    # Partial files in this worker's own cache are a killed predecessor's: none is ours yet.
    sweep_temp_files(settings.cache_dir / key_part("worker id", settings.worker_id), grace_s=0)
    names = load_catalog_modules(settings.nodes)
    log.info(
        "worker %s consuming %s from %s; catalog: %s; bundle classes from: %s",
        settings.worker_id,
        own_queue,
        redacted_url(settings.broker),
        ", ".join(names) or "empty",
        ", ".join(settings.allowed_modules) or "no module (SOMATIZE_ALLOWED_MODULES)",
    )
    original: Callable[..., str] = instance.startup_info
    instance.startup_info = lambda artlines=True: banner(
        original(artlines=artlines), redacted_url(settings.broker), names, settings.allowed_modules
    )


def refuse_a_duplicate_id(settings: Settings) -> None:
    """Exit with one line when another live process works under this worker id
    (:mod:`somatize_tasks.workers.identity`). Logging is not set up yet: the line goes
    to stderr. Redis unreachable: no check (the heartbeat says so, and retries)."""
    registry = Registry.from_settings(settings)
    try:
        check_unique(registry, settings.worker_id, instance_id(), settings.heartbeat_interval_s)
    except DuplicateWorkerIdError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        sys.stderr.flush()
        raise SystemExit(1) from None
    except RedisError:
        return


@celeryd_after_setup.connect(weak=False)
def _after_setup(sender: str, instance: Any, **_: Any) -> None:
    """Runs once logging is set up (lines logged at ``celeryd_init`` are lost)."""
    if isinstance(instance.app, SomatizeCelery):
        log_signing(instance.app.somatize_settings)


def log_signing(settings: Settings) -> None:
    """One line at start: are task messages signed, and with how many keys?"""
    if settings.message_key is None:
        log.warning(
            "task messages are unsigned: anyone who can write to the broker can run nodes "
            "here with inputs of their choosing; set SOMATIZE_MESSAGE_KEY on workers and "
            "producers to sign them"
        )
        return
    old = len(settings.message_keys_previous)
    log.info(
        "task messages are signed; unsigned or badly signed ones are refused "
        "(%d previous key%s accepted)",
        old,
        "" if old == 1 else "s",
    )


def banner(text: str, broker: str, catalog: list[str], allowed: list[str] | None = None) -> str:
    """Celery's start-up banner with our broker line and a catalog section added."""
    lines = [
        line.split(".> transport:")[0] + f".> transport:   {broker}"
        if ".> transport:" in line
        else line
        for line in text.rstrip("\n").split("\n")
    ]
    shown = ", ".join(catalog) if catalog else "empty: no --nodes (or SOMATIZE_NODES) given"
    noun = "node" if len(catalog) == 1 else "nodes"
    lines += ["", f" -------------- [catalog] {len(catalog)} {noun}", f"                .> {shown}"]
    if allowed:
        lines.append(f"                .> bundle classes from: {', '.join(allowed)}")
    return "\n".join(lines) + "\n"
