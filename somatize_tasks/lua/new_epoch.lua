-- A new pass (epoch) of a run. KEYS: results, meta. ARGV: info json, ttl.
-- Returns the new epoch, or -1 when the run's pass budget (``max_passes`` in its meta,
-- all loops together; runtime/state/start_state.py) is spent: no pass is numbered then.
local budget = tonumber(redis.call('HGET', KEYS[2], 'max_passes') or '0')
if budget > 0 and tonumber(redis.call('HGET', KEYS[1], 'epochs') or '0') >= budget then
  return -1
end
local epoch = redis.call('HINCRBY', KEYS[1], 'epochs', 1)
redis.call('HSET', KEYS[1], 'e:' .. epoch, ARGV[1])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2]))
return epoch
