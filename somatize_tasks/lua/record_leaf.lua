-- A leaf's completion: its record and its intent, in one trip.
-- KEYS as the record fragment, then the outbox. ARGV: the intent's two, then the
-- record's. Returns 0 (not recorded: the run ended, or a duplicate), -1 (fenced: a
-- stale attempt, see record.lua) or 1.
-- include: record
-- include: intent
local done = record(3)
if done ~= 1 then return done end
intend(ARGV[8])
return 1
