-- A worker leaves the registry at once (clean shutdown).
-- KEYS: seen, info, tags set, tasks, keys, instances, clashes, peers. ARGV: worker id,
-- tag hash prefix. Returns 1 if it was registered, else 0.
-- include: forget
return forget({ARGV[1]}, ARGV[2])
