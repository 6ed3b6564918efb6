-- A placement reserves its slots until ttl ms from now (Redis' clock).
-- KEYS: counts, expiries. ARGV: ttl ms, then field, slots pairs. Returns 1.
local t = redis.call('TIME')
local expiry = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
for i = 2, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
  redis.call('ZADD', KEYS[2], expiry, ARGV[i])
end
return 1
