-- Fragment: join(key, j), a join on hash ``key``. ARGV from index j: slot field, expr
-- json, remaining field, total field, slot prefix, ttl. Returns every slot once the
-- last branch is in, else false. HMGET in batches: Lua's unpack() has a stack limit
-- well below a wide parallel.
local function join(key, j)
  if redis.call('HSETNX', key, ARGV[j], ARGV[j + 1]) == 0 then return false end
  redis.call('EXPIRE', key, tonumber(ARGV[j + 5]))
  if redis.call('HINCRBY', key, ARGV[j + 2], -1) ~= 0 then return false end
  local total = tonumber(redis.call('HGET', key, ARGV[j + 3]))
  local out = {}
  for start = 0, total - 1, 1000 do
    local fields = {}
    for i = start, math.min(start + 999, total - 1) do fields[#fields + 1] = ARGV[j + 4] .. i end
    for _, v in ipairs(redis.call('HMGET', key, unpack(fields))) do out[#out + 1] = v end
  end
  return out
end
