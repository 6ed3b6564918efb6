-- Fragment: forget(ids, tag_prefix), shared by heartbeat and deregister: drop ``ids``
-- from every worker registry key. KEYS: seen, info, tags set, tasks, keys, instances,
-- clashes, peers. ``tag_prefix`` names the tag hashes. Returns how many were registered.
local function forget(ids, tag_prefix)
  if #ids == 0 then return 0 end
  local n = redis.call('HDEL', KEYS[2], unpack(ids))
  redis.call('ZREM', KEYS[1], unpack(ids))
  for i = 4, #KEYS do redis.call('HDEL', KEYS[i], unpack(ids)) end
  for _, tag in ipairs(redis.call('SMEMBERS', KEYS[3])) do
    redis.call('HDEL', tag_prefix .. tag, unpack(ids))
  end
  return n
end
