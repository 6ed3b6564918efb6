"""``PlanRun``: the producer's handle on a run — follow it, wait for it, cancel it.

Everything is read from the run's state in Redis, so ``PlanRun.attach(id)``
in another process sees exactly what the submitting process sees.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from redis.exceptions import ConnectionError as RedisConnectionError

from scheduler import DistributionPlan, PlanDocument, load_plan_document
from somatize_tasks.config.connections import reaching_redis
from somatize_tasks.config.settings import Settings, redacted_url
from somatize_tasks.errors import (
    KilledWorkerError,
    NodeFailedError,
    RunBudgetError,
    RunCancelledError,
    RunDeadlineError,
    RunEndedByReaperError,
    RunStateLostError,
    RunTimeoutError,
)
from somatize_tasks.runtime.engine.context import RunContext, producer_context
from somatize_tasks.runtime.engine.revoke import revoke_unfinished
from somatize_tasks.runtime.producer.forget import forget_run
from somatize_tasks.runtime.producer.outputs import OutputReader
from somatize_tasks.runtime.recovery.outage import through_redis_outages
from somatize_tasks.runtime.recovery.reaper import Reaper
from somatize_tasks.runtime.state.archive import FIELDS, log_lines
from somatize_tasks.runtime.state.packing import unpack
from somatize_tasks.runtime.state.run_state import CANCELLED, DONE, FAILED, FINAL_STATES
from somatize_tasks.store import key_part

log = logging.getLogger(__name__)
T = TypeVar("T")


#: The error a failed run's ``type`` raises in ``wait``; any other: NodeFailedError.
ERRORS_BY_KIND: dict[str, type[NodeFailedError]] = {
    "KilledWorker": KilledWorkerError,
    "PassBudgetExceeded": RunBudgetError,
    "RunDeadlineExceeded": RunDeadlineError,
    "RunStalled": RunEndedByReaperError,
    "WorkerLost": RunEndedByReaperError,
}


@dataclass
class NodeStatus:
    state: str
    worker: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    error: str | None = None
    #: Served from the content cache: none of its code ran (its state is ``done``).
    cached: bool = False
    #: The content-cache key its output came from or went to (``cache pin`` takes it).
    cache_key: str | None = None


@dataclass
class RunStatus:
    """A run's state and each node's (pending, running, done, failed, cancelled)."""

    run_id: str
    state: str
    nodes: dict[str, NodeStatus] = field(default_factory=dict)
    error: dict[str, Any] | None = None
    created_at: float | None = None
    finished_at: float | None = None
    transfers: list[dict[str, Any]] = field(default_factory=list)

    @property
    def done(self) -> int:
        return sum(1 for n in self.nodes.values() if n.state == DONE)

    @property
    def cached(self) -> int:
        """Done nodes served from the content cache (none of their code ran)."""
        return sum(1 for n in self.nodes.values() if n.state == DONE and n.cached)


@dataclass(frozen=True)
class RunDefinition:
    """What a run was asked to run: its plan document, parameters and ops."""

    document: PlanDocument
    params: dict[str, dict[str, Any]]
    ops: dict[str, str]


@dataclass(frozen=True)
class Progress:
    done: int
    total: int

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0


class PlanRun:
    """A submitted run. Build it with ``submit_plan`` or :meth:`attach`."""

    def __init__(
        self,
        run_id: str,
        context: RunContext,
        distribution: DistributionPlan,
        *,
        submitted: bool = False,
    ) -> None:
        self.id = run_id
        self.distribution = distribution
        self._context = context
        self._state = context.state(run_id)
        self._reaper: Any = None
        # A run submitted just now has nothing to repair yet (a dead worker takes a
        # heartbeat TTL to notice): its first watch waits one interval, so a short
        # run's wait is a blocking pop, not a repair pass competing with its workers.
        self._next_watch = time.monotonic() + context.settings.heartbeat_interval_s * submitted
        self._fresh = submitted

    @classmethod
    def attach(cls, run_id: str, settings: Settings | None = None) -> PlanRun:
        """Follow a run submitted elsewhere (another process, another machine)."""
        key_part("run id", run_id)
        settings = settings or Settings.from_env()
        context = producer_context(settings)
        raw = reaching_redis(
            settings, lambda: context.redis.hget(context.keys.run(run_id), "distribution")
        )
        if raw is None:
            raise RunStateLostError(
                f"run {run_id} is not known to Redis at {redacted_url(settings.redis_url)} "
                "(wrong id or key prefix, or its state expired or was forgotten)"
            )
        return cls(run_id, context, DistributionPlan.model_validate_json(unpack(raw)))

    def __repr__(self) -> str:
        return f"PlanRun(id={self.id!r})"

    @property
    def warnings(self) -> list[str]:
        """What placement and the plan itself warned about (also logged at submit), then
        what the run raised while running (a loop that stopped at its cap unsignalled)."""
        raised = reaching_redis(self._context.settings, self._state.warnings)
        return [*self.distribution.warnings, *raised]

    # --- following -------------------------------------------------------------------

    def status(self) -> RunStatus:
        client, state = self._context.redis, self._state
        pipe = client.pipeline()
        pipe.hmget(
            state.meta,
            "status",
            "error",
            "created_at",
            "finished_at",
            "node_ids",
            FIELDS["transfers"],
        )
        pipe.hgetall(state.nodes)
        pipe.lrange(state.transfers, 0, -1)
        meta, nodes_raw, transfers = reaching_redis(self._context.settings, pipe.execute)
        transfers = log_lines(meta[5], transfers)  # folded once the run ended
        if meta[0] is None:
            raise self._lost()
        run_state = meta[0].decode()
        nodes = {n: NodeStatus("pending") for n in json.loads(unpack(meta[4] or b"[]"))}
        for key, raw in nodes_raw.items():
            data = json.loads(raw)
            nodes[key.decode()] = NodeStatus(
                data["state"],
                data.get("worker"),
                data.get("started_at"),
                data.get("ended_at"),
                data.get("error"),
                bool(data.get("cached")),
                data.get("cache_key"),
            )
        if run_state == CANCELLED:
            for node in nodes.values():
                if node.state in ("pending", "running"):
                    node.state = CANCELLED
        return RunStatus(
            run_id=self.id,
            state=run_state,
            nodes=nodes,
            error=json.loads(meta[1]) if meta[1] else None,
            created_at=float(meta[2]) if meta[2] else None,
            finished_at=float(meta[3]) if meta[3] else None,
            transfers=[json.loads(t) for t in transfers],
        )

    def progress(self) -> Progress:
        client, state = self._context.redis, self._state
        pipe = client.pipeline()
        pipe.scard(state.done)
        pipe.hget(state.meta, "node_count")
        done, total = reaching_redis(self._context.settings, pipe.execute)
        if total is None:
            raise self._lost()
        return Progress(int(done), int(total))

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the run ends; its output, or an error saying why there is none.

        A Redis restart while waiting is ridden out, as workers do: for up to
        ``SOMATIZE_REDIS_RETRY_S`` (and never past ``timeout``), then the
        error names the server.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._fresh and (timeout is None or timeout >= 0.01):
            # Just submitted: it has not ended, or its end is in the "finished" list.
            first = partial(self._sleep_until_finished, min(1.0, timeout or 1.0))
            self._through_outage(first, deadline)
        self._fresh = False
        while True:
            status, output, error = self._through_outage(self._ending, deadline)
            if status is None:
                raise self._lost()
            if status in FINAL_STATES:
                return self._outcome(status, output, error, deadline)
            remaining = 1.0 if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                raise RunTimeoutError(f"run {self.id} still running after {timeout} s")
            self._through_outage(self.watch, deadline)
            self._through_outage(partial(self._sleep_until_finished, min(1.0, remaining)), deadline)

    def _sleep_until_finished(self, timeout_s: float) -> None:
        """Block on the run's "finished" list for at most ``timeout_s``."""
        self._context.redis.blpop([self._state.finished], timeout=timeout_s)

    def _through_outage(self, call: Callable[[], T], deadline: float | None) -> T:
        """``call()``; on a lost Redis, wait for it (within the retry budget and the
        caller's deadline) and call again, else the error naming the server."""
        budget_s = self._context.settings.redis_retry_s
        if deadline is not None:
            budget_s = max(0.0, min(budget_s, deadline - time.monotonic()))
        client = self._context.redis
        settings = self._context.settings
        return reaching_redis(
            settings, lambda: through_redis_outages(client, budget_s, call, f"run {self.id}: wait")
        )

    def _ending(self) -> tuple[str | None, bytes | None, bytes | None]:
        """The run's status with its output and error (set when it ends): one round trip."""
        status, output, error = self._context.redis.hmget(
            self._state.meta, "status", "output", "error"
        )
        return (None if status is None else status.decode()), output, error

    def _outcome(
        self, status: str, output: bytes | None, error: bytes | None, deadline: float | None
    ) -> Any:
        if status == DONE:
            reader = OutputReader(self._context, self.id, deadline)
            return reader.read(self._state.seal.open("output", output)) if output else None
        if status == FAILED:
            detail = json.loads(error) if error else {}
            raise ERRORS_BY_KIND.get(str(detail.get("type")), NodeFailedError)(self.id, detail)
        raise RunCancelledError(f"run {self.id} was cancelled")

    def result(self, node_id: str, *, timeout: float | None = 60.0) -> Any:
        """One node's latest output (the last pass, for a node inside a loop; a
        Branch node's is its input, as in Soma), within ``timeout`` seconds.

        An output only the node's worker held, when that worker is gone or
        does not hand it over in time, raises ``OutputUnavailableError``
        naming the node and the worker.
        """
        expr = self._state.latest([node_id]).get(node_id)
        if expr is None:
            raise LookupError(f"node '{node_id}' of run {self.id} has no output (yet)")
        deadline = None if timeout is None else time.monotonic() + timeout
        return OutputReader(self._context, self.id, deadline).read(expr)

    def states(self, *, timeout: float | None = 60.0) -> dict[str, Any]:
        """The states this run's fit learned, node id to value (empty for a forward run)."""
        refs = reaching_redis(self._context.settings, self._state.fitted_states)
        deadline = None if timeout is None else time.monotonic() + timeout
        reader = OutputReader(self._context, self.id, deadline)
        return {node_id: reader.read(expr) for node_id, expr in refs.items()}

    def definition(self) -> RunDefinition:
        """The plan (with its predecessors), parameters and ops the run was submitted with."""
        raw = reaching_redis(
            self._context.settings,
            lambda: self._context.redis.hmget(
                self._state.meta, "plan", "predecessors", "params", "ops"
            ),
        )
        # compressed once the run ended (runtime.state.archive)
        plan, preds, params, ops = (r and unpack(r) for r in raw)
        if plan is None:
            raise self._lost()
        return RunDefinition(
            load_plan_document(plan, json.loads(preds) if preds else None),
            json.loads(params) if params else {},
            json.loads(ops) if ops else {},
        )

    def cancel(self) -> bool:
        """Stop the run: nothing new starts, running nodes are revoked. False if it had ended."""
        if not self._state.finish(CANCELLED):
            return False
        revoke_unfinished(self._context.app, self._context.redis.hvals(self._state.nodes))
        return True

    def forget(self) -> bool:
        """Delete this ended run's state and values now, instead of ``run_ttl_s`` after
        it ended (as Celery's ``AsyncResult.forget()``); False if it was gone already.

        Raises :class:`RunStillRunningError` while the run runs. Values already read
        stay valid; this handle can read nothing more (see :mod:`.forget`).
        """
        return forget_run(self._context, self.id)

    # --- helpers ---------------------------------------------------------------------

    def watch(self) -> None:
        """Take part in watching this run (see the reaper): repair it if a worker died.

        ``wait`` and the CLI's progress bar call it; it does real work at most
        once per heartbeat interval.
        """
        now = time.monotonic()
        if now < self._next_watch:
            return
        self._next_watch = now + self._context.settings.heartbeat_interval_s
        if self._reaper is None:
            self._reaper = Reaper(self._context)
        try:
            self._reaper.repair(self.id)
        except RedisConnectionError:
            raise
        except Exception:  # a failed repair attempt must not break waiting
            log.exception("run %s: repair attempt failed", self.id)

    def _lost(self) -> RunStateLostError:
        return RunStateLostError(
            f"run {self.id}: its state is gone from Redis at "
            f"{redacted_url(self._context.settings.redis_url)} (expired, forgotten, flushed, or "
            "Redis restarted without persistence); the run cannot be followed any more"
        )
