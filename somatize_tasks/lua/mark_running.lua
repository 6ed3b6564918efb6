-- A block starts. KEYS: meta, nodes, history, reserved slots, their expiries. ARGV:
-- state json, task id, history line ('' for none), history length limit, ttl,
-- reservation field (``<worker>|<run>``, '' for none), node ids...
-- Returns -1 when the task must not run (the run ended, the node is done, or
-- this message is stale: the node was re-dispatched under another task id),
-- else the run's distribution version. A block that starts gives back one slot
-- its run reserved on this worker (the heartbeat counts it now; see
-- somatize_tasks/workers/reservations.py), in the same trip.
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
