"""The fault matrix: every fault, several times, on a real local cluster (bench.faults)."""
