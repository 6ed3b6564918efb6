-- KEYS: counts, expiries. ARGV: run key prefix ("<p>:run:"). Drops expired entries
-- and those of runs that ended (a run that ended releases its slots). A run not in
-- Redis yet keeps them: it is reserved before its state is written. Returns the rest
-- as a flat list (field, slots, ...).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
local flat = redis.call('HGETALL', KEYS[1])
local kept = {}
for i = 1, #flat, 2 do
  local run = string.match(flat[i], '|(.*)$')
  local status = redis.call('HGET', ARGV[1] .. run, 'status')
  if status and status ~= 'running' then
    old[#old + 1] = flat[i]
  else
    kept[#kept + 1] = flat[i]; kept[#kept + 1] = flat[i + 1]
  end
end
if #old > 0 then
  redis.call('HDEL', KEYS[1], unpack(old))
  redis.call('ZREM', KEYS[2], unpack(old))
end
return kept
