"""Sizing a cluster on paper: Redis CPU, memory and dispatch delay from measured costs."""
