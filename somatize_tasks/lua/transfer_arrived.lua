-- An input arrived for a waiting block. KEYS: nodes, results, transfers, meta. ARGV:
-- node id, task id, counter field, marker field, transfer record, arrival id. Returns
-- the distribution version when this arrival is the block's last missing input
-- (publish it now), else -1: a stale chain (the block was re-dispatched), a
-- redelivered duplicate, or more to come. The marker keeps the arrival's id: the same
-- arrival done again (its reply was lost with Redis) while the block still waits gets
-- the version again. The transfer log keeps its newest 20,000 records (history.MAX_EVENTS).
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
redis.call('RPUSH', KEYS[3], ARGV[5]); redis.call('LTRIM', KEYS[3], -20000, -1)
if redis.call('HINCRBY', KEYS[2], ARGV[3], -1) ~= 0 then return -1 end
if redis.call('HGET', KEYS[4], 'status') ~= 'running' then return -1 end
return tonumber(redis.call('HGET', KEYS[4], 'version') or '0')
