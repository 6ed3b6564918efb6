"""Celery tasks that run plan nodes (filled in by the router work)."""
