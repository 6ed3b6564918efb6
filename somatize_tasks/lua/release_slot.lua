-- One reserved slot given back (a block of the run started on the worker).
-- KEYS: counts, expiries. ARGV: field (``<worker>|<run>``). Returns 0 if there was
-- none, else 1.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then
  redis.call('HDEL', KEYS[1], ARGV[1]); redis.call('ZREM', KEYS[2], ARGV[1])
end
return 1
