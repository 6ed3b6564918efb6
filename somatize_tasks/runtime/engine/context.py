"""Per-process handles a run needs: Redis, the artifact store, compiled programs.

Built once per process and settings (a worker's pool child, or a producer)
and reused by every task, so a task costs no new connections and a run's
plan is compiled once per process, not once per node.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from celery import Celery
from redis import Redis

from scheduler import ExecutionPlan
from scheduler.placement.gc_pause import gc_paused
from somatize_tasks.cache.content import ContentCache
from somatize_tasks.config.connections import redis_client
from somatize_tasks.config.keys import RedisKeys
from somatize_tasks.config.settings import Settings
from somatize_tasks.lua import script
from somatize_tasks.messaging.celery_app import create_app
from somatize_tasks.messaging.signing import verification_keys
from somatize_tasks.runtime.compile.program import Program, compile_program
from somatize_tasks.runtime.state.history import HistoryLog
from somatize_tasks.runtime.state.packing import unpack
from somatize_tasks.runtime.state.redis_state import RedisRunState
from somatize_tasks.runtime.state.seal import state_keys
from somatize_tasks.runtime.state.starts import PendingStart, read_with_start
from somatize_tasks.store import ArtifactRef, ArtifactStore
from somatize_tasks.transfer import store_for
from somatize_tasks.workers.reservations import Reservations

PROGRAM_CACHE_SIZE = 128
#: What a run's meta holds that its program is compiled from (see ``_compile``).
PROGRAM_FIELDS = (
    "plan",
    "distribution",
    "params",
    "ops",
    "version",
    "time_limits",
    "predecessors",
    "mode",
    "labels",
    "states",
    "fused",
    "cache",
    "seed",
    "trial",
)
PRODUCER = "producer"


class ArtifactValues:
    """The artifact store seen as the runtime's ``ValueStore`` (refs as dicts)."""

    def __init__(self, store: ArtifactStore) -> None:
        self.store = store

    def put_value(
        self, run_id: str, node_id: str, epoch: int, value: Any, attempt: int = 0
    ) -> dict[str, Any]:
        return self.store.put(run_id, node_id, epoch, value, attempt).as_json()

    def put_shared(
        self, run_id: str, node_id: str, epoch: int, value: Any, attempt: int = 0
    ) -> dict[str, Any]:
        ref = self.store.put(run_id, node_id, epoch, value, attempt)
        if ref.inline is None:
            self.store.upload(ref)
        return ref.as_json()

    def get_value(self, ref: dict[str, Any]) -> Any:
        return self.store.get(ArtifactRef.model_validate(ref))


@dataclass
class RunContext:
    """What one process uses to take part in runs, as worker ``worker_id``."""

    app: Celery
    settings: Settings
    worker_id: str
    redis: Redis[bytes]
    keys: RedisKeys
    store: ArtifactStore
    _programs: OrderedDict[str, Program] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _content: ContentCache | None = None

    @property
    def values(self) -> ArtifactValues:
        return ArtifactValues(self.store)

    @property
    def content_cache(self) -> ContentCache:
        """The content cache over this process's artifact store (built on first use)."""
        if self._content is None:
            self._content = ContentCache.for_store(self.settings, self.store)
        return self._content

    def state(self, run_id: str) -> RedisRunState:
        return RedisRunState(
            self.redis,
            self.keys,
            run_id,
            self.settings.run_ttl_s,
            state_keys(verification_keys(self.settings)),
        )

    def history_log(self) -> HistoryLog:
        """Where this process writes run events that no state script writes."""
        return HistoryLog(self.redis, self.keys, self.worker_id, self.settings.run_ttl_s)

    def has_program(self, run_id: str) -> bool:
        """Whether the run's program is compiled here already (no read needed)."""
        with self._lock:
            return run_id in self._programs

    def program(
        self, run_id: str, *, refresh: bool = False, start: PendingStart | None = None
    ) -> Program | None:
        """The run's compiled plan (cached), or None if Redis no longer knows the run.

        ``refresh`` reloads it: the reaper re-placed nodes, so the
        distribution's version moved on. ``start``: a block's ``mark_running``,
        sent in the round trip that reads the plan if it must be read (see
        :func:`~somatize_tasks.runtime.state.starts.read_with_start`).
        """
        with self._lock:
            cached = None if refresh else self._programs.get(run_id)
            if cached is not None:
                self._programs.move_to_end(run_id)
                return cached
        key = self.keys.run(run_id)
        if start is None:
            raw = self.redis.hmget(key, *PROGRAM_FIELDS)
        else:
            mark = script(self.redis, "mark_running")
            raw = read_with_start(self.redis, key, PROGRAM_FIELDS, start, mark)
        if raw[0] is None:
            return None
        raw = [r and unpack(r) for r in raw]  # compressed once the run ended (runtime.archive)
        with gc_paused():
            program = self._compile(raw)
        self.remember(run_id, program)
        return program

    @staticmethod
    def _compile(raw: list[bytes | None]) -> Program:
        assert raw[0] is not None
        return compile_program(
            ExecutionPlan.model_validate_json(raw[0]),
            None,
            placed=_placed(raw[1]) if raw[1] else None,
            params=json.loads(raw[2] or b"{}"),
            ops=json.loads(raw[3] or b"{}"),
            version=int(raw[4] or 0),
            time_limits_s=_limits(raw[5]),
            predecessors=json.loads(raw[6]) if raw[6] else None,
            mode=(raw[7] or b"fit").decode(),
            labels=json.loads(raw[8]) if raw[8] else None,
            states=json.loads(raw[9] or b"{}"),
            fused=json.loads(raw[10]) if raw[10] else [],
            cache=raw[11] == b"on",
            seed=int(raw[12]) if raw[12] else None,
            trial=json.loads(raw[13]) if raw[13] else None,
        )

    def remember(self, run_id: str, program: Program) -> None:
        with self._lock:
            self._programs[run_id] = program
            while len(self._programs) > PROGRAM_CACHE_SIZE:
                self._programs.popitem(last=False)


def _placed(packed: bytes) -> dict[str, str]:
    """Node id -> worker id from a run's stored distribution, read as plain JSON.

    The producer validated the distribution; validating it again in every pool
    process cost ~0.2 s for a 2,000-node plan and ~0.6 s for 10,000, once per run
    and process. (For a study, the last trial's worker, as ``worker_of`` says.)
    """
    data = json.loads(unpack(packed))
    return {a["node_id"]: a["worker_id"] for a in data.get("assignments", [])}


def _limits(raw: bytes | None) -> tuple[float | None, float | None]:
    soft, hard = json.loads(raw or b"[null, null]")
    return soft, hard


_contexts: dict[tuple[int, int, str], RunContext] = {}
_contexts_lock = threading.Lock()


def producer_context(settings: Settings) -> RunContext:
    """This process's producer context for ``settings`` (a new app only the first time:
    :func:`run_context` keeps the first app it was given anyway)."""
    with _contexts_lock:
        found = _contexts.get((os.getpid(), id(settings), PRODUCER))
    return found or run_context(create_app(settings), settings, PRODUCER)


def run_context(app: Celery, settings: Settings, worker_id: str | None = None) -> RunContext:
    """This process's context for ``settings`` as ``worker_id`` (default: the worker's id)."""
    wid = worker_id or settings.worker_id
    key = (os.getpid(), id(settings), wid)
    with _contexts_lock:
        context = _contexts.get(key)
        if context is None:
            context = _contexts[key] = RunContext(
                app=app,
                settings=settings,
                worker_id=wid,
                redis=redis_client(settings),
                keys=RedisKeys(settings.key_prefix),
                store=store_for(settings, wid),
            )
        return context


_by_context: dict[int, Reservations] = {}


def reservations_of(context: RunContext) -> Reservations:
    """The :class:`Reservations` of a run context (one per context, reused)."""
    found = _by_context.get(id(context))
    if found is None:
        found = _by_context[id(context)] = Reservations(
            context.redis, context.keys, context.settings.reservation_ttl_s
        )
    return found
