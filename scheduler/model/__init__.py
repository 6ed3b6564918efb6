"""The wire models, as Soma's serde writes them: plans, graphs, workers, distribution plans."""
