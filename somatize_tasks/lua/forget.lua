-- Fragment: forget(ids, tag_prefix), shared by heartbeat and deregister: drop ``ids``
-- from every worker registry key. KEYS: seen, info, tags set, tasks, keys, peers.
-- ``tag_prefix`` names the tag hashes. Returns how many were registered.
local function forget(ids, tag_prefix)
  if #ids == 0 then return 0 end
  local n = redis.call('HDEL', KEYS[2], unpack(ids))
  redis.call('ZREM', KEYS[1], unpack(ids))
  redis.call('HDEL', KEYS[4], unpack(ids))
  redis.call('HDEL', KEYS[5], unpack(ids))
  if KEYS[6] then redis.call('HDEL', KEYS[6], unpack(ids)) end
  for _, tag in ipairs(redis.call('SMEMBERS', KEYS[3])) do
    redis.call('HDEL', tag_prefix .. tag, unpack(ids))
  end
  return n
end
