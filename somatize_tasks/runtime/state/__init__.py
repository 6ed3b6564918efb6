"""A run's state: the narrow interface, its Redis form with Lua scripts, its history and archive."""
