""":class:`RunState` in Redis: every method one atomic round trip.

Atomicity comes from Lua scripts where a check and a write must not be
split: a task result is recorded only while the run is running and only
the first time (``HSETNX``), so a message that ran twice cannot advance
the run twice; a join counts a branch in only once, and exactly one
completion sees the counter reach zero. Key names: :mod:`somatize_tasks.keys`.
"""

from __future__ import annotations

import json
import time
from typing import Any

from redis import Redis

from somatize_tasks.keys import RedisKeys
from somatize_tasks.runtime.state import FINAL_STATES, RUNNING, LeafResult, node_done
from somatize_tasks.runtime.values import Expr

# KEYS: meta, results, nodes, done, states. ARGV: leaf field, leaf json, n, n x (field,
# value) into results, m, m x (node id, state json), k, k x (node id, state ref json).
_RECORD_LEAF = """
if redis.call('HGET', KEYS[1], 'status') ~= 'running' then return 0 end
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 0 then return 0 end
local i = 4
for _ = 1, tonumber(ARGV[3]) do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]); i = i + 2
end
local m = tonumber(ARGV[i]); i = i + 1
for _ = 1, m do
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1]); redis.call('SADD', KEYS[4], ARGV[i]); i = i + 2
end
local k = tonumber(ARGV[i]); i = i + 1
for _ = 1, k do
  redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 1]); i = i + 2
end
if k > 0 then redis.call('EXPIRE', KEYS[5], tonumber(ARGV[i])) end
return 1
"""

# KEYS: results. ARGV: slot field, expr json, remaining field, total field, slot prefix.
# HMGET in batches: Lua's unpack() has a stack limit well below a wide parallel.
_JOIN = """
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return false end
if redis.call('HINCRBY', KEYS[1], ARGV[3], -1) ~= 0 then return false end
local total = tonumber(redis.call('HGET', KEYS[1], ARGV[4]))
local out = {}
for start = 0, total - 1, 1000 do
  local fields = {}
  for i = start, math.min(start + 999, total - 1) do fields[#fields + 1] = ARGV[5] .. i end
  for _, v in ipairs(redis.call('HMGET', KEYS[1], unpack(fields))) do out[#out + 1] = v end
end
return out
"""

# KEYS: results. ARGV: info json.
_NEW_EPOCH = """
local epoch = redis.call('HINCRBY', KEYS[1], 'epochs', 1)
redis.call('HSET', KEYS[1], 'e:' .. epoch, ARGV[1])
return epoch
"""

# KEYS: active runs, meta, finished, then every key to expire. ARGV: status, finished at,
# field, value, ttl, run id.
_FINISH = """
if redis.call('HGET', KEYS[2], 'status') ~= 'running' then return 0 end
redis.call('SREM', KEYS[1], ARGV[6])
table.remove(KEYS, 1)
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'finished_at', ARGV[2])
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], ARGV[3], ARGV[4]) end
redis.call('RPUSH', KEYS[2], ARGV[1])
for i = 1, #KEYS do redis.call('EXPIRE', KEYS[i], tonumber(ARGV[5])) end
return 1
"""

# KEYS: meta, nodes. ARGV: state json, task id, node ids...
# Returns -1 when the task must not run (the run ended, the node is done, or
# this message is stale: the node was re-dispatched under another task id),
# else the run's distribution version.
_MARK_RUNNING = """
if redis.call('HGET', KEYS[1], 'status') ~= 'running' then return -1 end
local current = redis.call('HGET', KEYS[2], ARGV[3])
if current then
  local state = cjson.decode(current)
  if state['state'] == 'done' or (state['task_id'] and state['task_id'] ~= ARGV[2]) then
    return -1
  end
end
for i = 3, #ARGV do redis.call('HSET', KEYS[2], ARGV[i], ARGV[1]) end
return tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
"""


# KEYS: nodes, results, transfers, meta. ARGV: node id, task id, counter field,
# marker field, transfer record. Returns the distribution version when this
# arrival is the block's last missing input (publish it now), else -1: a stale
# chain (the block was re-dispatched), a redelivered duplicate, or more to come.
_TRANSFER_ARRIVED = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current or cjson.decode(current)['task_id'] ~= ARGV[2] then return -1 end
if redis.call('HSETNX', KEYS[2], ARGV[4], 1) == 0 then return -1 end
redis.call('RPUSH', KEYS[3], ARGV[5])
if redis.call('HINCRBY', KEYS[2], ARGV[3], -1) ~= 0 then return -1 end
if redis.call('HGET', KEYS[4], 'status') ~= 'running' then return -1 end
return tonumber(redis.call('HGET', KEYS[4], 'version') or '0')
"""


# KEYS: results. ARGV: epoch, then (node id, expr json) pairs. A recomputed output
# replaces a node's latest value only where that still is the lost one (same node and
# pass), never a newer pass's.
_REPLACE_LATEST = """
for i = 2, #ARGV, 2 do
  local field = 'l:' .. ARGV[i]
  local current = redis.call('HGET', KEYS[1], field)
  if current then
    local ref = cjson.decode(current)['ref']
    if ref and ref['node_id'] == ARGV[i] and tostring(ref['iteration'] or 0) == ARGV[1] then
      redis.call('HSET', KEYS[1], field, ARGV[i + 1])
    end
  end
end
return 1
"""


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


class RedisRunState:
    """One run's state in Redis; cheap to build per task."""

    def __init__(self, client: Redis[bytes], keys: RedisKeys, run_id: str, ttl_s: int) -> None:
        self.client = client
        self.run_id = run_id
        self.ttl_s = ttl_s
        self.meta = keys.run(run_id)
        self.results = keys.run(run_id, "results")
        self.nodes = keys.run(run_id, "nodes")
        self.done = keys.run(run_id, "done")
        self.finished = keys.run(run_id, "finished")
        self.transfers = keys.run(run_id, "transfers")
        self.states = keys.run(run_id, "states")
        self.active_runs = keys.active_runs
        self._record = client.register_script(_RECORD_LEAF)
        self._join = client.register_script(_JOIN)
        self._new_epoch = client.register_script(_NEW_EPOCH)
        self._finish = client.register_script(_FINISH)
        self._mark_running = client.register_script(_MARK_RUNNING)
        self._transfer_arrived = client.register_script(_TRANSFER_ARRIVED)
        self._replace_latest = client.register_script(_REPLACE_LATEST)

    def all_keys(self) -> list[str]:
        return [
            self.meta, self.results, self.nodes, self.done, self.finished, self.transfers,
            self.states,
        ]  # fmt: skip

    # --- RunState --------------------------------------------------------------------

    def is_active(self) -> bool:
        return self.client.hget(self.meta, "status") == RUNNING.encode()

    def record_leaf(self, bid: int, epoch: int, nodes: list[str], result: LeafResult) -> bool:
        args: list[Any] = [f"b:{bid}:{epoch}", _dumps(result.to_json())]
        args.append(2 * len(result.node_outputs) + len(result.signals))
        for node_id, expr in result.node_outputs.items():
            text = _dumps(expr)
            args += [f"n:{node_id}:{epoch}", text, f"l:{node_id}", text]
        for node_id, verdict in result.signals.items():
            args += [f"s:{node_id}", verdict]
        args.append(len(nodes))
        for node_id in nodes:
            args += [node_id, _dumps(node_done(result, node_id, epoch))]
        args.append(len(result.states))
        for node_id, expr in result.states.items():
            args += [node_id, _dumps(expr)]
        args.append(self.ttl_s)
        keys = [self.meta, self.results, self.nodes, self.done, self.states]
        return bool(self._record(keys=keys, args=args))

    def node_output(self, node_id: str, epoch: int) -> Expr | None:
        raw = self.client.hget(self.results, f"n:{node_id}:{epoch}")
        return None if raw is None else dict(json.loads(raw))

    def latest(self, node_ids: list[str]) -> dict[str, Expr]:
        if not node_ids:
            return {}
        raw = self.client.hmget(self.results, [f"l:{n}" for n in node_ids])
        return {n: dict(json.loads(v)) for n, v in zip(node_ids, raw, strict=True) if v}

    def set_latest(self, node_id: str, expr: Expr) -> None:
        self.client.hset(self.results, f"l:{node_id}", _dumps(expr))

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
        return {k.decode(): dict(json.loads(v)) for k, v in raw.items()}

    def save_input(self, bid: int, epoch: int, expr: Expr) -> None:
        self.client.hset(self.results, f"i:{bid}:{epoch}", _dumps(expr))

    def load_input(self, bid: int, epoch: int) -> Expr:
        raw = self.client.hget(self.results, f"i:{bid}:{epoch}")
        if raw is None:
            raise LookupError(f"run {self.run_id}: no saved input for block {bid} pass {epoch}")
        return dict(json.loads(raw))

    def open_join(self, bid: int, epoch: int, expected: int) -> None:
        self.client.hset(
            self.results, mapping={f"jn:{bid}:{epoch}": expected, f"jt:{bid}:{epoch}": expected}
        )

    def join(self, bid: int, epoch: int, position: int, expr: Expr) -> list[Expr] | None:
        prefix = f"j:{bid}:{epoch}:"
        found = self._join(
            keys=[self.results],
            args=[
                f"{prefix}{position}",
                _dumps(expr),
                f"jn:{bid}:{epoch}",
                f"jt:{bid}:{epoch}",
                prefix,
            ],
        )
        if not found:
            return None
        return [dict(json.loads(raw)) for raw in found]

    def new_epoch(self, loop_bid: int, outer_epoch: int, pass_number: int) -> int:
        info = _dumps([loop_bid, outer_epoch, pass_number])
        return int(self._new_epoch(keys=[self.results], args=[info]))

    def epoch_info(self, epoch: int) -> tuple[int, int, int]:
        raw = self.client.hget(self.results, f"e:{epoch}")
        if raw is None:
            raise LookupError(f"run {self.run_id}: unknown loop pass {epoch}")
        loop_bid, outer, number = json.loads(raw)
        return int(loop_bid), int(outer), int(number)

    def mark_nodes(
        self, nodes: list[str], state: str, worker_id: str, epoch: int, **extra: Any
    ) -> None:
        status = _dumps({"state": state, "worker": worker_id, "epoch": epoch, **extra})
        self.client.hset(self.nodes, mapping=dict.fromkeys(nodes, status))

    def set_status(self, nodes: list[str], status: dict[str, Any]) -> None:
        self.client.hset(self.nodes, mapping=dict.fromkeys(nodes, _dumps(status)))

    def settle_nodes(self, nodes: list[str], state: str) -> None:
        if not nodes:
            return
        status = _dumps({"state": state, "ended_at": time.time()})
        pipe = self.client.pipeline()
        pipe.hset(self.nodes, mapping=dict.fromkeys(nodes, status))
        pipe.sadd(self.done, *nodes)
        pipe.execute()

    def mark_running(
        self, nodes: list[str], worker_id: str, bid: int, epoch: int, task_id: str
    ) -> int | None:
        """Nodes start: the run's distribution version, or None if this task must not run.

        None when the run ended, the block already completed, or the message
        is stale (the block was re-dispatched elsewhere under a new task id).
        """
        status = _dumps({
            "state": RUNNING, "worker": worker_id, "block": bid, "epoch": epoch,
            "started_at": time.time(), "task_id": task_id,
        })  # fmt: skip
        version = int(
            self._mark_running(keys=[self.meta, self.nodes], args=[status, task_id, *nodes])
        )
        return None if version < 0 else version

    def transfer_arrived(
        self, node_id: str, task_id: str, bid: int, epoch: int, ref_key: str, record: str
    ) -> int | None:
        """Count one input in, once; the distribution version if it was the last one."""
        version = self._transfer_arrived(
            keys=[self.nodes, self.results, self.transfers, self.meta],
            args=[
                node_id, task_id, f"p:{bid}:{epoch}", f"t:{bid}:{epoch}:{task_id}:{ref_key}", record
            ],
        )  # fmt: skip
        return None if int(version) < 0 else int(version)

    def finish(
        self, status: str, output: Expr | None = None, error: dict[str, Any] | None = None
    ) -> bool:
        field, value = ("", "")
        if output is not None:
            field, value = "output", _dumps(output)
        elif error is not None:
            field, value = "error", _dumps(error)
        args = [status, str(time.time()), field, value, self.ttl_s, self.run_id]
        keys = [
            self.active_runs,
            self.meta,
            self.finished,
            self.results,
            self.nodes,
            self.done,
            self.transfers,
            self.states,
        ]
        return bool(self._finish(keys=keys, args=args))

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
        pipe.hset(self.results, f"i:{bid}:{epoch}", _dumps(input_expr))
        if missing:
            pipe.hset(self.results, f"p:{bid}:{epoch}", missing)
        if transfer_records:
            pipe.rpush(self.transfers, *transfer_records)
        pipe.hset(self.nodes, mapping=dict.fromkeys(nodes, _dumps(status)))
        if own:
            pipe.execute()

    def await_recompute(self, bid: int, epoch: int, producers: list[tuple[int, int]]) -> None:
        """Block ``bid`` waits until each producer (block, epoch) has run again."""
        self.client.hset(self.results, f"rn:{bid}:{epoch}", len(producers))
        for producer, producer_epoch in producers:
            field = f"rw:{producer}:{producer_epoch}"
            waiting = [w for w in json.loads(self.client.hget(self.results, field) or b"[]")
                       if w != [bid, epoch]]  # fmt: skip
            waiting.append([bid, epoch])
            self.client.hset(self.results, mapping={
                field: _dumps(waiting), f"rc:{producer}:{producer_epoch}": 1,
            })  # fmt: skip

    def take_recompute(
        self, bid: int, epoch: int, outputs: dict[str, Expr]
    ) -> list[tuple[int, int]] | None:
        """If this block ran again for the reaper: store its new outputs and return
        the (block, epoch) pairs waiting for it; None for an ordinary duplicate."""
        if not self.client.hdel(self.results, f"rc:{bid}:{epoch}"):
            return None
        pipe = self.client.pipeline()
        for node_id, expr in outputs.items():
            pipe.hset(self.results, f"n:{node_id}:{epoch}", _dumps(expr))
        pipe.hget(self.results, f"rw:{bid}:{epoch}")
        pipe.hdel(self.results, f"rw:{bid}:{epoch}")
        waiting = json.loads(pipe.execute()[-2] or b"[]")
        pairs = [x for node_id, expr in outputs.items() for x in (node_id, _dumps(expr))]
        if pairs:
            self._replace_latest(keys=[self.results], args=[str(epoch), *pairs])
        return [(int(b), int(e)) for b, e in waiting]

    def recompute_arrived(self, bid: int, epoch: int) -> bool:
        """One recomputed input of the block is back; True when it was the last."""
        return int(self.client.hincrby(self.results, f"rn:{bid}:{epoch}", -1)) <= 0

    def first_noticed(self, what: str) -> float:
        """When a repair problem (``what``) was first noticed, for grace periods."""
        field = f"g:{what}"
        self.client.hsetnx(self.results, field, time.time())
        return float(self.client.hget(self.results, field) or time.time())

    def replace_distribution(self, distribution_json: str) -> None:
        """Store a new distribution and bump its version, so every process reloads it."""
        pipe = self.client.pipeline()
        pipe.hset(self.meta, "distribution", distribution_json)
        pipe.hincrby(self.meta, "version", 1)
        pipe.execute()

    # --- reading, for PlanRun ----------------------------------------------------------

    def status(self) -> str | None:
        raw = self.client.hget(self.meta, "status")
        return None if raw is None else raw.decode()

    def is_final(self) -> bool:
        return self.status() in FINAL_STATES
