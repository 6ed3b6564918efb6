"""The Lua scripts behind :mod:`somatize_tasks.runtime.redis_state`.

Each is one atomic step of a run's bookkeeping, where a check and a write
must not be split (see that module's docstring). KEYS and ARGV are
documented above each script.
"""

from __future__ import annotations

import weakref

from redis import Redis
from redis.commands.core import Script

# KEYS: meta, results, nodes, done, states, latest, history. ARGV from index b: leaf
# field, worker id, ttl, then counted sections of pairs: results fields (signals),
# latest outputs, node statuses, fitted states; then counted history lines and the
# history's length limit.
RECORD = """
local function record(b)
  if redis.call('HGET', KEYS[1], 'status') ~= 'running' then return false end
  if redis.call('HSETNX', KEYS[2], ARGV[b], ARGV[b + 1]) == 0 then return false end
  local ttl = tonumber(ARGV[b + 2])
  local i = b + 3
  local function pairs_into(key)
    local n = tonumber(ARGV[i]); i = i + 1
    for _ = 1, n do redis.call('HSET', key, ARGV[i], ARGV[i + 1]); i = i + 2 end
    return n
  end
  pairs_into(KEYS[2])
  if pairs_into(KEYS[6]) > 0 then redis.call('EXPIRE', KEYS[6], ttl) end
  local m = tonumber(ARGV[i]); i = i + 1
  for _ = 1, m do
    redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1]); redis.call('SADD', KEYS[4], ARGV[i])
    i = i + 2
  end
  if pairs_into(KEYS[5]) > 0 then redis.call('EXPIRE', KEYS[5], ttl) end
  redis.call('EXPIRE', KEYS[2], ttl)
  local h = tonumber(ARGV[i]); i = i + 1
  for _ = 1, h do redis.call('RPUSH', KEYS[7], ARGV[i]); i = i + 1 end
  if h > 0 then
    redis.call('LTRIM', KEYS[7], -tonumber(ARGV[i]), -1); redis.call('EXPIRE', KEYS[7], ttl)
  end
  return true
end
"""

# A join on hash ``key``. ARGV from index j: slot field, expr json, remaining field,
# total field, slot prefix, ttl. Returns every slot once the last branch is in, else
# false. HMGET in batches: Lua's unpack() has a stack limit well below a wide parallel.
JOIN_ON = """
local function join(key, j)
  if redis.call('HSETNX', key, ARGV[j], ARGV[j + 1]) == 0 then return false end
  redis.call('EXPIRE', key, tonumber(ARGV[j + 5]))
  if redis.call('HINCRBY', key, ARGV[j + 2], -1) ~= 0 then return false end
  local total = tonumber(redis.call('HGET', key, ARGV[j + 3]))
  local out = {}
  for start = 0, total - 1, 1000 do
    local fields = {}
    for i = start, math.min(start + 999, total - 1) do fields[#fields + 1] = ARGV[j + 4] .. i end
    for _, v in ipairs(redis.call('HMGET', key, unpack(fields))) do out[#out + 1] = v end
  end
  return out
end
"""

# A completion leaves its intent (ARGV 1-2: outbox field and json; KEYS[8]: the
# outbox) with its record: what the engine does next, redone by the reaper if the
# process dies before the follow-up is recorded (runtime/outbox.py).
INTENT = """
local function intend(ttl)
  redis.call('HSET', KEYS[8], ARGV[1], ARGV[2]); redis.call('EXPIRE', KEYS[8], tonumber(ttl))
end
"""
# KEYS as RECORD, then the outbox. ARGV: the intent's two, then the record's.
RECORD_LEAF = RECORD + INTENT + """
if not record(3) then return 0 end
intend(ARGV[5])
return 1
"""
# KEYS: results, outbox. ARGV: the six join arguments, then an intent field to drop
# when the join still waits ('' for none: nothing follows the completion then).
JOIN = JOIN_ON + """
local out = join(KEYS[1], 1)
if not out and ARGV[7] ~= '' then redis.call('HDEL', KEYS[2], ARGV[7]) end
return out
"""
# A Parallel branch's completion: record it, then count it into its join, in one trip.
# KEYS as RECORD_LEAF; ARGV: the intent's two, the six join arguments, then the
# record's. Returns 0 (not recorded), 1 (recorded, the join waits) or every slot
# (this was the last branch: only then is the intent, to complete the join, left).
RECORD_AND_JOIN = RECORD + JOIN_ON + INTENT + """
if not record(9) then return 0 end
local out = join(KEYS[2], 3)
if not out then return 1 end
intend(ARGV[8])
return out
"""

# KEYS: results. ARGV: info json, ttl.
NEW_EPOCH = """
local epoch = redis.call('HINCRBY', KEYS[1], 'epochs', 1)
redis.call('HSET', KEYS[1], 'e:' .. epoch, ARGV[1])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2]))
return epoch
"""

# KEYS: active runs, meta, finished, results (deleted), then every key to expire.
# ARGV: status, finished at, field, value, ttl, run id.
FINISH = """
if redis.call('HGET', KEYS[2], 'status') ~= 'running' then return 0 end
redis.call('SREM', KEYS[1], ARGV[6])
redis.call('UNLINK', KEYS[4])
table.remove(KEYS, 4)
table.remove(KEYS, 1)
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'finished_at', ARGV[2])
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], ARGV[3], ARGV[4]) end
redis.call('RPUSH', KEYS[2], ARGV[1])
for i = 1, #KEYS do redis.call('EXPIRE', KEYS[i], tonumber(ARGV[5])) end
return 1
"""

# KEYS: meta, nodes, history, reserved slots, their expiries. ARGV: state json, task
# id, history line ('' for none), history length limit, ttl, reservation field
# (``<worker>|<run>``, '' for none), node ids...
# Returns -1 when the task must not run (the run ended, the node is done, or
# this message is stale: the node was re-dispatched under another task id),
# else the run's distribution version. A block that starts gives back one slot
# its run reserved on this worker (the heartbeat counts it now; see
# somatize_tasks/reservations.py), in the same trip.
MARK_RUNNING = """
if redis.call('HGET', KEYS[1], 'status') ~= 'running' then return -1 end
local current = redis.call('HGET', KEYS[2], ARGV[7])
if current then
  local state = cjson.decode(current)
  if state['state'] == 'done' or (state['task_id'] and state['task_id'] ~= ARGV[2]) then
    return -1
  end
end
for i = 7, #ARGV do redis.call('HSET', KEYS[2], ARGV[i], ARGV[1]) end
if ARGV[3] ~= '' then
  redis.call('RPUSH', KEYS[3], ARGV[3]); redis.call('LTRIM', KEYS[3], -tonumber(ARGV[4]), -1)
  redis.call('EXPIRE', KEYS[3], tonumber(ARGV[5]))
end
if ARGV[6] ~= '' and redis.call('HEXISTS', KEYS[4], ARGV[6]) == 1 then
  if redis.call('HINCRBY', KEYS[4], ARGV[6], -1) <= 0 then
    redis.call('HDEL', KEYS[4], ARGV[6]); redis.call('ZREM', KEYS[5], ARGV[6])
  end
end
return tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
"""


# KEYS: nodes, results, transfers, meta. ARGV: node id, task id, counter field,
# marker field, transfer record, arrival id. Returns the distribution version when
# this arrival is the block's last missing input (publish it now), else -1: a stale
# chain (the block was re-dispatched), a redelivered duplicate, or more to come.
# The marker keeps the arrival's id: the same arrival done again (its reply was
# lost with Redis) while the block still waits gets the version again.
TRANSFER_ARRIVED = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return -1 end
local status = cjson.decode(current)
if status['task_id'] ~= ARGV[2] then return -1 end
if redis.call('HGET', KEYS[4], 'status') ~= 'running' then return -1 end
if redis.call('HSETNX', KEYS[2], ARGV[4], ARGV[6]) == 0 then
  local redo = redis.call('HGET', KEYS[2], ARGV[4]) == ARGV[6]
    and status['waiting_for'] == 'transfers'
    and tonumber(redis.call('HGET', KEYS[2], ARGV[3]) or '1') == 0
  if not redo then return -1 end
  return tonumber(redis.call('HGET', KEYS[4], 'version') or '0')
end
redis.call('RPUSH', KEYS[3], ARGV[5])
if redis.call('HINCRBY', KEYS[2], ARGV[3], -1) ~= 0 then return -1 end
if redis.call('HGET', KEYS[4], 'status') ~= 'running' then return -1 end
return tonumber(redis.call('HGET', KEYS[4], 'version') or '0')
"""


# KEYS: latest. ARGV: epoch, then (node id, expr json) pairs. A recomputed output
# replaces a node's latest value only where that still is the lost one (same node and
# pass), never a newer pass's.
REPLACE_LATEST = """
for i = 2, #ARGV, 2 do
  local field = ARGV[i]
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


_SCRIPTS = {
    "record": RECORD_LEAF, "record_and_join": RECORD_AND_JOIN,
    "join": JOIN, "new_epoch": NEW_EPOCH, "finish": FINISH,
    "mark_running": MARK_RUNNING, "transfer_arrived": TRANSFER_ARRIVED,
    "replace_latest": REPLACE_LATEST,
}  # fmt: skip
_registered: weakref.WeakKeyDictionary[Redis[bytes], dict[str, Script]] = (
    weakref.WeakKeyDictionary()
)


def registered(client: Redis[bytes]) -> dict[str, Script]:
    """The run scripts registered on ``client``, once per client: a state is built per
    task, and hashing eight scripts each time cost ~60 us a block."""
    found = _registered.get(client)
    if found is None:
        found = _registered[client] = {
            name: client.register_script(text) for name, text in _SCRIPTS.items()
        }
    return found
