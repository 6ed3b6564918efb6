-- A worker's heartbeat, stamped with Redis' clock; prunes entries past retention.
-- KEYS: seen, info, tags set, tasks, keys, instances, clashes, peers. ARGV: worker id,
-- compact WorkerInfo, retention ms, tag hash prefix, held task ids (JSON list, '' for
-- no report), the writing process's instance id ('' for none), heartbeat ttl ms, then
-- the worker's tags. Returns {Redis time in ms, the instance this beat clashed with or ''}.
-- A clash: the id's last beat, still fresh, came from another process (two live
-- processes under one worker id; workers/identity.py). It is kept in the clashes hash,
-- and beats report no held tasks while a clash is recent (two TTLs): each twin's
-- report would hide the other's tasks, and the orphan rule
-- (runtime/recovery/orphans.py) would run their nodes again.
-- include: forget
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local clash = ''
if ARGV[6] ~= '' then
  local previous = redis.call('HGET', KEYS[6], ARGV[1])
  if previous and previous ~= ARGV[6] then
    local seen = redis.call('ZSCORE', KEYS[1], ARGV[1])
    if seen and tonumber(seen) >= now - tonumber(ARGV[7]) then
      clash = previous
      redis.call('HSET', KEYS[7], ARGV[1], previous .. ' ' .. ARGV[6] .. ' ' .. now)
    end
  end
  redis.call('HSET', KEYS[6], ARGV[1], ARGV[6])
end
local clashing = clash ~= ''
local last = redis.call('HGET', KEYS[7], ARGV[1])
if last and not clashing then
  local at = tonumber(string.match(last, '(%d+)$') or '0')
  clashing = at >= now - 2 * tonumber(ARGV[7])
end
local record = ARGV[2] .. ' ' .. string.format('%013d', now)
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], record)
if ARGV[5] == '' or clashing then redis.call('HDEL', KEYS[4], ARGV[1])
else redis.call('HSET', KEYS[4], ARGV[1], ARGV[5]) end
for i = 8, #ARGV do
  redis.call('SADD', KEYS[3], ARGV[i])
  redis.call('HSET', ARGV[4] .. ARGV[i], ARGV[1], record)
end
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]), 'LIMIT', 0, 500)
forget(old, ARGV[4])
return {now, clash}
