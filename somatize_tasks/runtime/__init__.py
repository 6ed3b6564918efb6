"""Running plans: the node task, the completion-driven dispatcher and run state."""
