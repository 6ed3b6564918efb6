"""Runs that survive: the reaper and its election, re-placement, recompute, orphans, outbox."""
