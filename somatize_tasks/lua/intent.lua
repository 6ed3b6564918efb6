-- Fragment: intend(ttl). A completion leaves its intent (ARGV 1-2: outbox field and
-- json; KEYS[8]: the outbox) with its record: what the engine does next, redone by the
-- reaper if the process dies before the follow-up is recorded (runtime/recovery/outbox.py).
local function intend(ttl)
  redis.call('HSET', KEYS[8], ARGV[1], ARGV[2]); redis.call('EXPIRE', KEYS[8], tonumber(ttl))
end
