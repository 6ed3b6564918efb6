"""A cluster on one machine: embedded Redis, real worker processes, a shared directory.

Used by ``somatize-tasks demo`` (in the foreground, torn down at the end)
and ``somatize-tasks cluster up``/``down`` (in the background).
"""

from somatize_tasks.errors import ClusterError
from somatize_tasks.local_cluster.cluster import LocalCluster, WorkerSpec, worker_specs
from somatize_tasks.local_cluster.redis_server import find_redis_server
from somatize_tasks.local_cluster.saved import SavedCluster, save_state

__all__ = [
    "ClusterError",
    "LocalCluster",
    "SavedCluster",
    "WorkerSpec",
    "find_redis_server",
    "save_state",
    "worker_specs",
]
