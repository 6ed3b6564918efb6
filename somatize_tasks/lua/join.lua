-- A branch counted into its join.
-- KEYS: results, outbox. ARGV: the six join arguments, then an intent field to drop
-- when the join still waits ('' for none: nothing follows the completion then).
-- Returns every slot once the last branch is in, else false.
-- include: join_on
local out = join(KEYS[1], 1)
if not out and ARGV[7] ~= '' then redis.call('HDEL', KEYS[2], ARGV[7]) end
return out
