-- A block starts. KEYS: meta, nodes, history, reserved slots, their expiries, results.
-- ARGV: state json, task id, history line ('' for none), history length limit, ttl,
-- reservation field (``<worker>|<run>``, '' for none), attempt counter field, node ids...
-- Returns -1 when the task must not run (the run ended, the node is done, or
-- this message is stale: the node was re-dispatched under another task id),
-- else {the run's distribution version, this execution's attempt, the previous
-- status when this very task had started before ('' otherwise: a restart of the same
-- message, whose earlier execution died; runtime/recovery/deaths.py)}.
-- The attempt (fencing): every start of a block and pass takes the next number, kept
-- in the nodes' status; only the current attempt's completion is recorded
-- (record.lua), so an earlier execution that comes back is fenced. A block that
-- starts gives back one slot its run reserved on this worker (the heartbeat counts it
-- now; see somatize_tasks/workers/reservations.py), in the same trip.
if redis.call('HGET', KEYS[1], 'status') ~= 'running' then return -1 end
local current = redis.call('HGET', KEYS[2], ARGV[8])
local previous = ''
if current then
  local state = cjson.decode(current)
  if state['state'] == 'done' or (state['task_id'] and state['task_id'] ~= ARGV[2]) then
    return -1
  end
  if state['state'] == 'running' and state['attempt'] then previous = current end
end
local attempt = redis.call('HINCRBY', KEYS[6], ARGV[7], 1)
redis.call('EXPIRE', KEYS[6], tonumber(ARGV[5]))
local status = string.sub(ARGV[1], 1, -2) .. ',"attempt":' .. attempt .. '}'
for i = 8, #ARGV do redis.call('HSET', KEYS[2], ARGV[i], status) end
if ARGV[3] ~= '' then
  redis.call('RPUSH', KEYS[3], ARGV[3]); redis.call('LTRIM', KEYS[3], -tonumber(ARGV[4]), -1)
  redis.call('EXPIRE', KEYS[3], tonumber(ARGV[5]))
end
if ARGV[6] ~= '' and redis.call('HEXISTS', KEYS[4], ARGV[6]) == 1 then
  if redis.call('HINCRBY', KEYS[4], ARGV[6], -1) <= 0 then
    redis.call('HDEL', KEYS[4], ARGV[6]); redis.call('ZREM', KEYS[5], ARGV[6])
  end
end
return {tonumber(redis.call('HGET', KEYS[1], 'version') or '0'), attempt, previous}
