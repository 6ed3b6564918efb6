-- A worker's heartbeat, stamped with Redis' clock; prunes entries past retention.
-- KEYS: seen, info, tags set, tasks, keys, peers. ARGV: worker id, compact WorkerInfo,
-- retention ms, tag hash prefix, held task ids (JSON list, '' for no report), then the
-- worker's tags. Returns Redis time in ms.
-- include: forget
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local record = ARGV[2] .. ' ' .. string.format('%013d', now)
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], record)
if ARGV[5] == '' then redis.call('HDEL', KEYS[4], ARGV[1])
else redis.call('HSET', KEYS[4], ARGV[1], ARGV[5]) end
for i = 6, #ARGV do
  redis.call('SADD', KEYS[3], ARGV[i])
  redis.call('HSET', ARGV[4] .. ARGV[i], ARGV[1], record)
end
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]), 'LIMIT', 0, 500)
forget(old, ARGV[4])
return now
