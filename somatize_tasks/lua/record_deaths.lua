-- KEYS: results. ARGV: ttl, then (block, attempt key, worker) triples. Adds each
-- attempt once; returns, per triple, the block's deaths so far as JSON
-- (attempt -> worker).
local out = {}
for i = 2, #ARGV, 3 do
  local field = 'k:' .. ARGV[i]
  local raw = redis.call('HGET', KEYS[1], field)
  local deaths = raw and cjson.decode(raw) or {}
  if deaths[ARGV[i + 1]] == nil then
    deaths[ARGV[i + 1]] = ARGV[i + 2]
    raw = cjson.encode(deaths)
    redis.call('HSET', KEYS[1], field, raw)
  end
  out[#out + 1] = raw
end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
return out
