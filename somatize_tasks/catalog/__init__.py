"""The node catalog: what a worker may run, by name (see :mod:`.entries`)."""
