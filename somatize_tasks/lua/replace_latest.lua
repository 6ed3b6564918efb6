-- KEYS: latest. ARGV: epoch, then (node id, expr json) pairs. A recomputed output
-- replaces a node's latest value only where that still is the lost one (same node and
-- pass), never a newer pass's. Returns 1.
for i = 2, #ARGV, 2 do
  local field = ARGV[i]
  local current = redis.call('HGET', KEYS[1], field)
  if current then
    local ref = cjson.decode(current)['ref']
    if ref and ref['node_id'] == ARGV[i] and tostring(ref['iteration'] or 0) == ARGV[1] then
      redis.call('HSET', KEYS[1], field, ARGV[i + 1])
    end
  end
end
return 1
