-- Fragment: record(b), a completion's record, for the scripts that include it.
-- KEYS: meta, results, nodes, done, states, latest, history. ARGV from index b: the
-- fence (a node of the block, its pass, the attempt that ran it; '' for no fence),
-- leaf field, worker id, ttl, then counted sections of pairs: results fields
-- (signals), latest outputs, node statuses, fitted states; then counted history lines
-- and the history's length limit. Returns 1 when recorded, 0 when the run ended or
-- the leaf was recorded already, -1 when the attempt is fenced: the block was
-- dispatched or started again since this execution began (its status holds another
-- attempt), so what it wrote (under keys of its own) is never referenced.
local function record(b)
  if redis.call('HGET', KEYS[1], 'status') ~= 'running' then return 0 end
  if ARGV[b + 2] ~= '' then
    local raw = redis.call('HGET', KEYS[3], ARGV[b])
    local now = raw and cjson.decode(raw) or {}
    if tostring(now['attempt']) ~= ARGV[b + 2] or tostring(now['epoch']) ~= ARGV[b + 1] then
      return -1
    end
  end
  b = b + 3
  if redis.call('HSETNX', KEYS[2], ARGV[b], ARGV[b + 1]) == 0 then return 0 end
  local ttl = tonumber(ARGV[b + 2])
  local i = b + 3
  local function pairs_into(key)
    local n = tonumber(ARGV[i]); i = i + 1
    for _ = 1, n do redis.call('HSET', key, ARGV[i], ARGV[i + 1]); i = i + 2 end
    return n
  end
  pairs_into(KEYS[2])
  if pairs_into(KEYS[6]) > 0 then redis.call('EXPIRE', KEYS[6], ttl) end
  local m = tonumber(ARGV[i]); i = i + 1
  for _ = 1, m do
    redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1]); redis.call('SADD', KEYS[4], ARGV[i])
    i = i + 2
  end
  if pairs_into(KEYS[5]) > 0 then redis.call('EXPIRE', KEYS[5], ttl) end
  redis.call('EXPIRE', KEYS[2], ttl)
  local h = tonumber(ARGV[i]); i = i + 1
  for _ = 1, h do redis.call('RPUSH', KEYS[7], ARGV[i]); i = i + 1 end
  if h > 0 then
    redis.call('LTRIM', KEYS[7], -tonumber(ARGV[i]), -1); redis.call('EXPIRE', KEYS[7], ttl)
  end
  return 1
end
