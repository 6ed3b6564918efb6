"""Looking at runs: the run record, timeline, dashboard and the Soma run-directory export."""
