"""What happens when a worker process starts, however it was started.

``somatize-tasks worker`` and plain ``celery -A somatize_tasks worker``
both end here, so the environment alone is enough for the second:

- the worker consumes its own queue (``somatize.w.<worker_id>``) and, unless
  ``-Q`` says otherwise, nothing else;
- it takes the node name ``<worker_id>@<host>`` unless ``-n`` was given, so
  Flower lists workers by their somatize ids;
- it imports its catalog modules (``Settings.nodes``) in the main process,
  before the pool forks, and records its id in the catalog for errors;
- the heartbeat bootstep registers it while its pool runs;
- its start-up banner shows the broker without a password mask when there is
  no password (kombu prints ``redis://:**@`` either way) and lists the
  catalog it loaded, so a wrong ``--nodes`` shows before the first task.

The handler is connected when this module is imported, which the package's
``__init__`` does, so every somatize app's workers get it.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from typing import Any

from celery.signals import celeryd_init

from somatize_tasks.catalog import default_catalog, load_catalog_modules
from somatize_tasks.celery_app import SomatizeCelery
from somatize_tasks.gc import sweep_temp_files
from somatize_tasks.keys import queue_name
from somatize_tasks.kombu_compat import guard_restore_on_close
from somatize_tasks.settings import redacted_url
from somatize_tasks.store import key_part

log = logging.getLogger(__name__)


@celeryd_init.connect(weak=False)
def _on_worker_init(sender: str, instance: Any, options: dict[str, Any], **_: Any) -> None:
    app = instance.app
    if not isinstance(app, SomatizeCelery):
        return
    guard_restore_on_close()
    settings = app.somatize_settings
    own_queue = queue_name(settings.worker_id)
    if not options.get("queues"):
        app.amqp.queues.select([own_queue])  # with -Q, HeartbeatStep adds it to theirs
    if str(instance.hostname).startswith("celery@"):
        instance.hostname = f"{settings.worker_id}@{socket.gethostname()}"
    default_catalog.worker_id = settings.worker_id
    # Partial files in this worker's own cache are a killed predecessor's: none is ours yet.
    sweep_temp_files(settings.cache_dir / key_part("worker id", settings.worker_id), grace_s=0)
    names = load_catalog_modules(settings.nodes)
    log.info(
        "worker %s consuming %s from %s; catalog: %s",
        settings.worker_id, own_queue, redacted_url(settings.broker), ", ".join(names) or "empty",
    )
    original: Callable[..., str] = instance.startup_info
    instance.startup_info = lambda artlines=True: banner(
        original(artlines=artlines), redacted_url(settings.broker), names
    )


def banner(text: str, broker: str, catalog: list[str]) -> str:
    """Celery's start-up banner with our broker line and a catalog section added."""
    lines = [
        line.split(".> transport:")[0] + f".> transport:   {broker}"
        if ".> transport:" in line else line
        for line in text.rstrip("\n").split("\n")
    ]  # fmt: skip
    shown = ", ".join(catalog) if catalog else "empty: no --nodes (or SOMATIZE_NODES) given"
    noun = "node" if len(catalog) == 1 else "nodes"
    lines += ["", f" -------------- [catalog] {len(catalog)} {noun}", f"                .> {shown}"]
    return "\n".join(lines) + "\n"
