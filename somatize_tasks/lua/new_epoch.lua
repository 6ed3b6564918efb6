-- A new pass (epoch) of a run. KEYS: results. ARGV: info json, ttl.
-- Returns the new epoch.
local epoch = redis.call('HINCRBY', KEYS[1], 'epochs', 1)
redis.call('HSET', KEYS[1], 'e:' .. epoch, ARGV[1])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2]))
return epoch
