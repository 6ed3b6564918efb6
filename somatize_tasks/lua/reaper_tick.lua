-- One reaper tick: take or renew the cluster's reaper lease, and say what is due.
-- KEYS: lease, active runs, workers seen. ARGV: token, lease ms, heartbeat ttl ms,
-- previous cutoff ms ('' on a first tick). Returns {0} when another process leads,
-- else {1, cutoff ms, active runs, heartbeats expired since the previous cutoff}.
local held = redis.call('GET', KEYS[1]) == ARGV[1]
if held then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
elseif not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0}
end
local t = redis.call('TIME')
local cutoff = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(ARGV[3])
local since = tonumber(ARGV[4]) or cutoff
local expired = 0
if since < cutoff then expired = redis.call('ZCOUNT', KEYS[3], '(' .. since, cutoff) end
return {1, cutoff, redis.call('SCARD', KEYS[2]), expired}
