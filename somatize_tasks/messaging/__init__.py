"""The Celery and kombu edge: the app, signed messages, the worker's message guard."""
