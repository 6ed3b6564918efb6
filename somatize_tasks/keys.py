"""Every Redis key, Celery queue and task name prefix, derived in one place.

Queues
    ``somatize.w.<worker_id>``  the only queue a worker consumes: node tasks
    and the transfer tasks the router aims at that worker.

Redis keys (``<p>`` is ``Settings.key_prefix``, ``somatize`` by default)

    ==========================  ======  ==========================================
    key                         type    content
    ==========================  ======  ==========================================
    ``<p>:workers:seen``        ZSET    worker id -> last heartbeat, ms of Redis
                                        ``TIME`` (one clock for every machine)
    ``<p>:workers:info``        HASH    worker id -> WorkerInfo JSON
    ==========================  ======  ==========================================

A worker is live while its ``seen`` score is within the heartbeat TTL; a
SIGKILLed worker's entries linger (the fault-tolerance side reads them as
"dead") until a heartbeat write prunes entries older than
:data:`WORKER_RETENTION_MS`. The router extends :class:`RedisKeys` with its
run-state keys; add them to this table.
"""

from __future__ import annotations

QUEUE_PREFIX = "somatize.w."
WORKER_RETENTION_MS = 24 * 3600 * 1000


def queue_name(worker_id: str) -> str:
    """The Celery queue a worker consumes: ``somatize.w.<worker_id>``."""
    return f"{QUEUE_PREFIX}{worker_id}"


class RedisKeys:
    """Key names under one prefix; one instance per settings object."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def key(self, *parts: str) -> str:
        """``<prefix>:part:part...``: the one way a key name is formatted."""
        return ":".join((self.prefix, *parts))

    @property
    def workers_seen(self) -> str:
        return self.key("workers", "seen")

    @property
    def workers_info(self) -> str:
        return self.key("workers", "info")


#: Every task that runs a plan node is named under this prefix; heartbeats
#: count exactly these as a worker's ``active_jobs``.
NODE_TASK_PREFIX = "somatize.node."
TRANSFER_UPLOAD_TASK = "somatize.transfer.upload"
TRANSFER_DOWNLOAD_TASK = "somatize.transfer.download"
