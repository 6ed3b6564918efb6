"""A cluster on one machine: embedded Redis, real worker processes, a shared directory.

Used by ``somatize-tasks demo`` (in the foreground, torn down at the end)
and ``somatize-tasks cluster up``/``down`` (in the background).
"""

from somatize_tasks.local_cluster.cluster import LocalCluster, WorkerSpec, worker_specs
from somatize_tasks.local_cluster.redis_server import ClusterError, find_redis_server

__all__ = ["ClusterError", "LocalCluster", "WorkerSpec", "find_redis_server", "worker_specs"]
