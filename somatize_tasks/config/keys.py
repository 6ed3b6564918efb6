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
    ``<p>:workers:info``        HASH    worker id -> ``"<seen ms> <WorkerInfo
                                        JSON>"`` (see :mod:`somatize_tasks.workers.registry`)
    ``<p>:workers:tags``        SET     every tag a worker advertised
    ``<p>:workers:tag:<tag>``   HASH    the same records, for workers with <tag>
    ``<p>:workers:tasks``       HASH    worker id -> JSON list of the node task ids
                                        it holds (heartbeat; orphan detection)
    ``<p>:workers:keys``        HASH    worker id -> JSON list of the message key
                                        ids it accepts (``["unsigned"]``: any), at start
    ``<p>:workers:peers``       HASH    worker id -> JSON ``{"address": "host:port"}``:
                                        where it serves values (null: it does not),
                                        at start (``workers.peers``)
    ``<p>:workers:instance``    HASH    worker id -> the process that beat last
                                        (``host:pid:token``; ``workers.identity``)
    ``<p>:workers:clash``       HASH    worker id -> ``"<instance> <instance> <ms>"``:
                                        two live processes beat under that id
    ``<p>:reaper:lease``        STRING  the elected reaper's token (PX lease)
    ``<p>:msg:<id>``            STRING  who took a signed task message, until it
                                        expires (``messaging.replay``)
    ``<p>:ctl:<node>:<nonce>``  STRING  a control command a worker acted on, until
                                        it expires (``messaging.signed_control``)
    ``<p>:runs``                ZSET    run id -> creation time (s)
    ``<p>:runs:active``         SET     run ids still running (the reaper's list)
    ``<p>:run:<id>``            HASH    run meta: status, plan, distribution,
                                        params, ops, input, output, error, times,
                                        limits (``deadline_at``, ``max_node_deaths``);
                                        once ended, ``history_z``/``transfers_z``:
                                        those lists, folded (``runtime.archive``)
    ``<p>:run:<id>:results``    HASH    dispatcher state: ``b:<block>:<epoch>``
                                        task results (first wins), ``n:<node>:
                                        <epoch>`` outputs, ``s:`` loop signals,
                                        ``i:`` saved inputs, ``j:``/``jn:`` joins,
                                        ``e:`` loop passes, ``p:`` pending transfers,
                                        ``k:<block>`` deaths (``runtime.deaths``),
                                        ``a:<block>:<epoch>`` attempts (fencing)
    ``<p>:run:<id>:nodes``      HASH    node id -> state JSON (state, worker,
                                        task id, attempt, times)
    ``<p>:run:<id>:done``       SET     node ids done (progress)
    ``<p>:run:<id>:transfers``  LIST    transfer records, for status and timeline
    ``<p>:run:<id>:finished``   LIST    one item pushed when the run ends (wait)
    ``<p>:run:<id>:history``    LIST    every node attempt's start/end/failure,
                                        bounded (:mod:`somatize_tasks.runtime.state.history`)
    ``<p>:run:<id>:states``     HASH    fitted states of a fit run, node id -> ref
    ``<p>:run:<id>:latest``     HASH    a graph run's latest output per node
    ``<p>:run:<id>:outbox``     HASH    blocks recorded as dispatched whose
                                        messages are not known to be out yet
    ``<p>:run:<id>:lease``      STRING  who is repairing the run now (PX lease)
    ``<p>:study:<id>:reports``  LIST    metrics a trial's nodes reported, for the
                                        study's driver (``somatize_tasks.study``)
    ``<p>:study:<id>:verdict:<r>``      LIST    the driver's answer to report <r>:
                                        ``stop`` or ``go`` (expires in a minute)
    ``<p>:study:<id>:pruned``   SET     trial numbers the pruner stopped
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


#: How many characters of a run id a Flower task name shows (``run:1a2b3c``).
RUN_TAG_CHARS = 6


def run_tag(run_id: str) -> str:
    """The run part of a task's Flower name (``node:train_svm run:1a2b3c``): enough of
    the id to tell runs apart at a glance; the task's arguments carry the whole id."""
    return f"run:{run_id[:RUN_TAG_CHARS]}"


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

    @property
    def worker_tags(self) -> str:
        """Every tag a worker advertised (which per-tag hashes exist)."""
        return self.key("workers", "tags")

    @property
    def workers_tasks(self) -> str:
        """Which node tasks each live worker holds, as its heartbeat last reported."""
        return self.key("workers", "tasks")

    @property
    def workers_keys(self) -> str:
        """Which message keys each worker accepts (ids only), announced at its start."""
        return self.key("workers", "keys")

    @property
    def workers_peers(self) -> str:
        """Where each worker serves its values to others (direct transfers), at its start."""
        return self.key("workers", "peers")

    @property
    def workers_instances(self) -> str:
        """Which process (``host:pid:token``) wrote each worker id's last heartbeat."""
        return self.key("workers", "instance")

    @property
    def workers_clashes(self) -> str:
        """Worker ids two live processes heartbeat under (``workers.identity``)."""
        return self.key("workers", "clash")

    def worker_tag(self, tag: str) -> str:
        """The registry hash of the workers with ``tag`` (``""``: the prefix itself)."""
        return self.key("workers", "tag", tag)

    @property
    def reaper_lease(self) -> str:
        """Which process is the cluster's reaper now (a token, with a PX expiry)."""
        return self.key("reaper", "lease")

    @property
    def runs(self) -> str:
        return self.key("runs")

    @property
    def active_runs(self) -> str:
        """Runs still running: what the reaper watches."""
        return self.key("runs", "active")

    def message_taken(self, message_id: str) -> str:
        """Who took a signed task message (its id), until the message expires."""
        return self.key("msg", message_id)

    def control_taken(self, node: str, nonce: str) -> str:
        """A control command ``node`` acted on (its nonce), until the command expires."""
        return self.key("ctl", node, nonce)

    def run(self, run_id: str, part: str | None = None) -> str:
        """A run's meta hash, or one of its parts (``results``, ``nodes``, ...)."""
        return self.key("run", run_id) if part is None else self.key("run", run_id, part)

    def study(self, study_id: str, part: str) -> str:
        """A study's channel between trials and its driver (``reports``, ``pruned``,
        ``verdict:<report id>``)."""
        return self.key("study", study_id, part)

    def run_keys(self, run_id: str) -> list[str]:
        """Every key of one run: its meta hash and each of :data:`RUN_PARTS`."""
        return [self.run(run_id), *(self.run(run_id, part) for part in RUN_PARTS)]


#: A run's keys besides its meta hash (the table above lists what each holds).
RUN_PARTS = (
    "results",
    "nodes",
    "done",
    "transfers",
    "finished",
    "states",
    "latest",
    "outbox",
    "history",
    "lease",
)


#: Every task that runs a plan node is named under this prefix; heartbeats
#: count exactly these as a worker's ``active_jobs``.
NODE_TASK_PREFIX = "somatize.node."
TRANSFER_TASK_PREFIX = "somatize.transfer."
TRANSFER_UPLOAD_TASK = "somatize.transfer.upload"
TRANSFER_DOWNLOAD_TASK = "somatize.transfer.download"
#: A direct transfer: the target pulls the value from its holder (S3 if that fails).
TRANSFER_PULL_TASK = "somatize.transfer.pull"
#: The node tasks: one block, or a batch of blocks for one worker.
NODE_TASK = "somatize.node.run"
NODE_BATCH_TASK = "somatize.node.batch"
#: The steps that end a transfer chain: its value arrived, or it could not.
INPUT_READY_TASK = "somatize.run.input_ready"
TRANSFER_FAILED_TASK = "somatize.run.transfer_failed"
