"""On the worker: the Celery node tasks, the body that runs a block, streams."""
