"""Placing a plan on workers: the walk, its filters and scores, lanes and phases."""
