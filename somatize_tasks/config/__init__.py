"""Configuration: the settings object, every Redis key and task name, Redis clients."""
