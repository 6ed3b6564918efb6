"""What tests and benchmarks share: services, worker processes, catalogs, plans, faults."""
