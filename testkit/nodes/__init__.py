"""Node catalogs that test and benchmark workers load with --nodes."""
