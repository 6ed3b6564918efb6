"""Workers as the cluster sees them: heartbeats, the live registry, slot reservations, start-up."""
