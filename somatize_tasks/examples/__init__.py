"""Example node catalogs and plans for demos and tests."""
