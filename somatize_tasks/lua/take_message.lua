-- A worker takes a signed message (or control command) once: replays are refused.
-- KEYS: the taken key (its id), workers seen (heartbeats). ARGV: taker
-- (``<worker id>|<instance>``), the taker's worker id, the message's expiry (unix
-- seconds, from its signed header), heartbeat ttl ms, margin ms.
-- Judged on Redis' clock. Returns 'expired'; 'new' (taken now, remembered until its
-- expiry); 'mine' (this same taker took it before); 'retaken' (its taker is dead: its
-- heartbeat expired, or it was an earlier instance of this worker, so it is
-- this taker's now: a redelivery after a real death); or 'taken:<taker>' (a live
-- worker holds it: a replay or a duplicate).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local left = math.floor(tonumber(ARGV[3]) * 1000) - now
if left <= 0 then return 'expired' end
local ttl = left + tonumber(ARGV[5])
local current = redis.call('GET', KEYS[1])
if not current then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
  return 'new'
end
if current == ARGV[1] then return 'mine' end
local worker = string.match(current, '^([^|]*)|') or current
if worker ~= ARGV[2] then
  local seen = redis.call('ZSCORE', KEYS[2], worker)
  if seen and tonumber(seen) >= now - tonumber(ARGV[4]) then return 'taken:' .. current end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
return 'retaken'
