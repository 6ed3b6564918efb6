-- A run ends, once. KEYS: active runs, meta, finished, results (deleted), then every
-- key to expire. ARGV: status, finished at, field, value, ttl, run id.
-- Returns 1, or 0 when the run had already ended.
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
