-- A Parallel branch's completion: record it, then count it into its join, in one trip.
-- KEYS as record_leaf; ARGV: the intent's two, the six join arguments, then the
-- record's. Returns 0 (not recorded), -1 (fenced: a stale attempt, see record.lua),
-- 1 (recorded, the join waits) or every slot (this was the last branch: only then is
-- the intent, to complete the join, left).
-- include: record
-- include: join_on
-- include: intent
local done = record(9)
if done ~= 1 then return done end
local out = join(KEYS[2], 3)
if not out then return 1 end
intend(ARGV[8])
return out
