-- Release a lock or lease only if this holder still holds it (a lapsed one may be
-- another's by now): the placement lock, the reaper's cluster lease, a run's lease.
-- KEYS: the lock. ARGV: the holder's token. Returns 1 if released, else 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
