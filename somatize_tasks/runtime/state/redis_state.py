""":class:`RunState` in Redis: every method one atomic round trip.

Atomicity comes from Lua scripts where a check and a write must not be
split: a task result is recorded only while the run is running and only
the first time (``HSETNX``), so a message that ran twice cannot advance
the run twice; a join counts a branch in only once, and exactly one
completion sees the counter reach zero. Key names: :mod:`somatize_tasks.config.keys`.

Every key ends: ``results`` (the working state: inputs, joins, loop passes,
signals) is refreshed to the run's TTL by every write and deleted when the
run ends; what a finished run keeps (its meta, node states, latest outputs,
transfers, fitted states) expires with it. While the run runs, the reaper
renews them all (:meth:`RedisRunState.keep_alive`). Each output is stored once, in
``latest``. The process that ends a run folds its history and transfers into
its meta (:mod:`somatize_tasks.runtime.state.archive`; ``python -m bench.bench_size``).
"""

from __future__ import annotations

import json
from typing import Any

from redis import Redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from somatize_tasks.config.clock import redis_now
from somatize_tasks.config.keys import RedisKeys
from somatize_tasks.lua import registered
from somatize_tasks.runtime.compile.values import Expr
from somatize_tasks.runtime.state.archive import FIELDS, fold_logs
from somatize_tasks.runtime.state.failures import FailureState
from somatize_tasks.runtime.state.history import MAX_EVENTS, history_key
from somatize_tasks.runtime.state.outbox_state import OutboxState, compact_json
from somatize_tasks.runtime.state.repair_state import RepairState
from somatize_tasks.runtime.state.run_state import (
    FINAL_STATES,
    RUNNING,
    LeafResult,
    node_done,
)
from somatize_tasks.runtime.state.seal import Seal
from somatize_tasks.runtime.state.start_state import PassState, StartState
from somatize_tasks.runtime.state.starts import PendingStart, send_with_start
from somatize_tasks.workers.reservations import reservation_keys

#: Meta fields holding the warnings a run raised while running.
WARNING_PREFIX = "warn:"


class RedisRunState(StartState, PassState, FailureState, OutboxState, RepairState):
    """One run's state in Redis; cheap to build per task."""

    def __init__(
        self,
        client: Redis[bytes],
        keys: RedisKeys,
        run_id: str,
        ttl_s: int,
        seal_keys: list[bytes] | None = None,
    ) -> None:
        self.client = client
        self.run_id = run_id
        #: MACs on the values that decide a result (runtime/state/seal.py).
        self.seal = Seal(seal_keys or [], run_id)
        self.ttl_s = ttl_s
        self.meta = keys.run(run_id)
        self.results = keys.run(run_id, "results")
        self.nodes = keys.run(run_id, "nodes")
        self.done = keys.run(run_id, "done")
        self.finished = keys.run(run_id, "finished")
        self.transfers = keys.run(run_id, "transfers")
        self.states = keys.run(run_id, "states")
        self.latest_outputs = keys.run(run_id, "latest")
        #: Blocks recorded as dispatched whose messages are not known to be out yet.
        self.outbox = keys.run(run_id, "outbox")
        self.history = history_key(keys, run_id)
        self.active_runs = keys.active_runs
        self.reservations = reservation_keys(keys)
        scripts = registered(client)
        #: The next block of this batch, to start with this block's record (starts.py).
        self.start_next: PendingStart | None = None
        #: The last record was refused because its attempt is no longer the block's
        #: current one (fencing: the block was dispatched or started again since).
        self.fenced = False
        self._record = scripts["record_leaf"]
        self._record_and_join = scripts["record_and_join"]
        self._join = scripts["join"]
        self._new_epoch = scripts["new_epoch"]
        self._finish = scripts["finish_run"]
        self._mark_running = scripts["mark_running"]
        self._transfer_arrived = scripts["transfer_arrived"]
        self._replace_latest = scripts["replace_latest"]

    def all_keys(self) -> list[str]:
        return [
            self.meta,
            self.results,
            self.nodes,
            self.done,
            self.finished,
            self.transfers,
            self.states,
            self.latest_outputs,
            self.outbox,
            self.history,
        ]

    # --- RunState --------------------------------------------------------------------

    def is_active(self) -> bool:
        return self.client.hget(self.meta, "status") == RUNNING.encode()

    def record_leaf(self, bid: int, epoch: int, nodes: list[str], result: LeafResult) -> bool:
        intent = self._intent_args(bid, epoch, o=result.output, l=result.label, h=result.handoff)
        reply = int(
            self._call(
                self._record,
                self._record_keys,
                [*intent, *self._record_args(bid, epoch, nodes, result)],
            )
        )
        self.fenced = reply < 0
        if reply != 1:
            self.intent = None
        return reply == 1

    def record_and_join(
        self,
        bid: int,
        epoch: int,
        nodes: list[str],
        result: LeafResult,
        parallel: int,
        position: int,
    ) -> tuple[bool, list[Expr] | None]:
        found = self._call(
            self._record_and_join,
            self._record_keys,
            [
                *self._intent_args(parallel, epoch, j=1),
                *self._join_args(parallel, epoch, position, result.output),
                *self._record_args(bid, epoch, nodes, result),
            ],
        )
        if isinstance(found, list):
            return True, self._slots(parallel, epoch, found)
        self.intent = None  # left only by the branch that completed the join
        self.fenced = int(found) < 0
        return int(found) == 1, None

    def _call(self, script: Script, keys: list[str], args: list[Any]) -> Any:
        """Run ``script``, with the pending start of the next block if there is one."""
        start, self.start_next = self.start_next, None
        if start is None:
            return script(keys=keys, args=args)
        return send_with_start(self.client, script, keys, args, start, self._mark_running)

    @property
    def _record_keys(self) -> list[str]:
        return [
            self.meta,
            self.results,
            self.nodes,
            self.done,
            self.states,
            self.latest_outputs,
            self.history,
            self.outbox,
        ]

    def _record_args(self, bid: int, epoch: int, nodes: list[str], result: LeafResult) -> list[Any]:
        fence = [nodes[0], epoch, result.attempt] if result.attempt else ["", "", ""]
        args: list[Any] = [*fence, f"b:{bid}:{epoch}", result.worker_id, self.ttl_s]
        args.append(len(result.signals))
        for node_id, verdict in result.signals.items():
            args += [f"s:{node_id}", verdict]
        args.append(len(result.node_outputs))
        for node_id, expr in result.node_outputs.items():
            args += [node_id, self.seal.close(f"latest:{node_id}", expr)]
        args.append(len(nodes))
        for node_id in nodes:
            args += [node_id, compact_json(node_done(result, node_id, epoch))]
        args.append(len(result.states))
        for node_id, expr in result.states.items():
            args += [node_id, self.seal.close(f"state:{node_id}", expr)]
        args += [len(result.history), *result.history, MAX_EVENTS]
        return args

    def _join_args(self, bid: int, epoch: int, position: int, expr: Expr) -> list[Any]:
        prefix = f"j:{bid}:{epoch}:"
        return [
            f"{prefix}{position}",
            self.seal.close(f"{prefix}{position}", expr),
            f"jn:{bid}:{epoch}",
            f"jt:{bid}:{epoch}",
            prefix,
            self.ttl_s,
        ]

    def latest(self, node_ids: list[str]) -> dict[str, Expr]:
        if not node_ids:
            return {}
        raw = self.client.hmget(self.latest_outputs, node_ids)
        return {
            n: self.seal.open(f"latest:{n}", v) for n, v in zip(node_ids, raw, strict=True) if v
        }

    def set_latest(self, node_id: str, expr: Expr) -> None:
        pipe = self.client.pipeline(transaction=False)
        pipe.hset(self.latest_outputs, node_id, self.seal.close(f"latest:{node_id}", expr))
        pipe.expire(self.latest_outputs, self.ttl_s)
        pipe.execute()

    def latest_signal(self, node_id: str) -> str | None:
        raw = self.client.hget(self.results, f"s:{node_id}")
        return None if raw is None else raw.decode()

    def run_input(self) -> Expr:
        raw = self.client.hget(self.meta, "input")
        if raw is None:
            raise LookupError(f"run {self.run_id}: its input is no longer in Redis")
        return dict(json.loads(raw))

    def fitted_states(self) -> dict[str, Expr]:
        """The states this run's fit learned, by node (refs into the store)."""
        raw = self.client.hgetall(self.states)
        return {k.decode(): self.seal.open(f"state:{k.decode()}", v) for k, v in raw.items()}

    def save_input(self, bid: int, epoch: int, expr: Expr) -> None:
        self._working({f"i:{bid}:{epoch}": self.seal.close(f"i:{bid}:{epoch}", expr)})

    def load_input(self, bid: int, epoch: int) -> Expr:
        raw = self.client.hget(self.results, f"i:{bid}:{epoch}")
        if raw is None:
            raise LookupError(f"run {self.run_id}: no saved input for block {bid} pass {epoch}")
        return self.seal.open(f"i:{bid}:{epoch}", raw)

    def open_join(self, bid: int, epoch: int, expected: int) -> None:
        self._working({f"jn:{bid}:{epoch}": expected, f"jt:{bid}:{epoch}": expected})

    def join(self, bid: int, epoch: int, position: int, expr: Expr) -> list[Expr] | None:
        found = self._join(
            keys=[self.results, self.outbox],
            args=[*self._join_args(bid, epoch, position, expr), self.intent or ""],
        )
        if not found:
            self.intent = None  # the join dropped it: nothing follows this completion
            return None
        return self._slots(bid, epoch, found)

    def mark_nodes(
        self, nodes: list[str], state: str, worker_id: str, epoch: int, **extra: Any
    ) -> None:
        status = compact_json({"state": state, "worker": worker_id, "epoch": epoch, **extra})
        self.client.hset(self.nodes, mapping=dict.fromkeys(nodes, status))

    def set_status(self, nodes: list[str], status: dict[str, Any], *, outbox: bool = False) -> None:
        """Nodes' status; with ``outbox`` the block is in the outbox until sent."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hset(self.nodes, mapping=dict.fromkeys(nodes, compact_json(status)))
        if outbox:
            self._into_outbox(pipe, status["block"], status["epoch"], status["task_id"])
        pipe.execute()

    def add_warning(self, key: str, message: str) -> None:
        """Kept in the run's meta (``warn:<key>``), so it lives and ends with the run."""
        self.client.hset(self.meta, f"{WARNING_PREFIX}{key}", message)

    def warnings(self) -> list[str]:
        """The warnings the run raised while running, in key order."""
        found = dict(self.client.hscan_iter(self.meta, match=f"{WARNING_PREFIX}*", count=100))
        return [found[k].decode() for k in sorted(found)]

    def settle_nodes(self, nodes: list[str], state: str) -> None:
        if not nodes:
            return
        status = compact_json({"state": state, "ended_at": redis_now(self.client)})
        pipe = self.client.pipeline()
        pipe.hset(self.nodes, mapping=dict.fromkeys(nodes, status))
        pipe.sadd(self.done, *nodes)
        pipe.execute()

    def finish(
        self, status: str, output: Expr | None = None, error: dict[str, Any] | None = None
    ) -> bool:
        field, value = ("", "")
        if output is not None:
            field, value = "output", self.seal.close("output", output)
        elif error is not None:
            field, value = "error", compact_json(error)
        args = [status, str(redis_now(self.client)), field, value, self.ttl_s, self.run_id]
        keys = [
            self.active_runs,
            self.meta,
            self.finished,
            self.results,
            self.nodes,
            self.done,
            self.transfers,
            self.states,
            self.latest_outputs,
            self.outbox,
            self.history,
        ]
        ended = self._finish_run(keys, args)
        if ended:  # its history and transfers, compressed into the meta (runtime.archive)
            fold_logs(
                self.client,
                self.meta,
                {FIELDS["history"]: self.history, FIELDS["transfers"]: self.transfers},
            )
        return ended

    def _finish_run(self, keys: list[str], args: list[Any]) -> bool:
        if self.intent is None:
            return bool(self._finish(keys=keys, args=args))
        pipe = self.client.pipeline(transaction=False)  # the run's last completion's intent
        pipe.evalsha(self._finish.sha, len(keys), *keys, *args)  # type: ignore[attr-defined]
        self._clear_intent(pipe)
        done = pipe.execute(raise_on_error=False)[0]
        if isinstance(done, NoScriptError):  # Redis forgot it (a restart): send it again
            return bool(self._finish(keys=keys, args=args))
        if isinstance(done, Exception):
            raise done
        return bool(done)

    # --- dispatching and repairing ------------------------------------------------------

    def record_dispatch(
        self,
        nodes: list[str],
        bid: int,
        epoch: int,
        input_expr: Expr,
        status: dict[str, Any],
        missing: int = 0,
        transfer_records: list[str] | None = None,
        pipe: Any = None,
    ) -> None:
        """One round trip before a block's messages go out: its input (so it can be
        dispatched again), its pending-transfer count, its status (with the task id).
        With ``pipe`` the writes join that pipeline, which the caller executes."""
        own = pipe is None
        pipe = self.client.pipeline() if own else pipe
        pipe.hset(self.results, f"i:{bid}:{epoch}", self.seal.close(f"i:{bid}:{epoch}", input_expr))
        if missing:
            pipe.hset(self.results, f"p:{bid}:{epoch}", missing)
        if transfer_records:  # the TTL too: the run may have ended and folded the list
            pipe.rpush(self.transfers, *transfer_records)
            pipe.ltrim(self.transfers, -MAX_EVENTS, -1)  # bounded like the history
            pipe.expire(self.transfers, self.ttl_s)
        pipe.hset(self.nodes, mapping=dict.fromkeys(nodes, compact_json(status)))
        pipe.expire(self.results, self.ttl_s)
        self._into_outbox(pipe, bid, epoch, status["task_id"])
        if own:
            pipe.execute()

    def keep_alive(self) -> None:
        """Renew the TTL of every key of a run still running (the reaper calls it),
        so a run that outlasts ``run_ttl_s`` keeps its state."""
        pipe = self.client.pipeline(transaction=False)
        for key in self.all_keys():
            pipe.expire(key, self.ttl_s)
        pipe.execute()

    # --- reading, for PlanRun ----------------------------------------------------------

    def status(self) -> str | None:
        raw = self.client.hget(self.meta, "status")
        return None if raw is None else raw.decode()

    def is_final(self) -> bool:
        return self.status() in FINAL_STATES
