"""The producer's side: submit_plan, the PlanRun handle, outputs, forgetting, local runs, states."""
