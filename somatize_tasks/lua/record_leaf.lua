-- A leaf's completion: its record and its intent, in one trip.
-- KEYS as the record fragment, then the outbox. ARGV: the intent's two, then the
-- record's. Returns 0 (not recorded: the run ended, or a duplicate) or 1.
-- include: record
-- include: intent
if not record(3) then return 0 end
intend(ARGV[5])
return 1
