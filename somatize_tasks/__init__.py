"""somatize_tasks: run Soma execution plans on Celery workers.

``app`` is the default Celery app (``celery -A somatize_tasks worker``); its
settings are read from ``SOMATIZE_*`` the first time it is configured.
"""

from somatize_tasks import worker_boot  # noqa: F401  (connects the worker start-up hook)
from somatize_tasks.catalog import Catalog, call_node, default_catalog, load_catalog_modules, node
from somatize_tasks.celery_app import create_app, settings_of
from somatize_tasks.errors import MessageKeyError, OutputUnavailableError, RunError
from somatize_tasks.keys import RedisKeys, queue_name
from somatize_tasks.registry import Registry, live_workers
from somatize_tasks.runtime.control import Handoff
from somatize_tasks.runtime.handle import (
    KilledWorkerError,
    NodeFailedError,
    PlanRun,
    Progress,
    RunCancelledError,
    RunDeadlineError,
    RunStateLostError,
    RunStatus,
    RunTimeoutError,
)
from somatize_tasks.runtime.local import run_local
from somatize_tasks.runtime.submit import NoWorkersError, StudyRun, submit_plan, submit_study
from somatize_tasks.settings import Settings

app = create_app()

__all__ = [
    "Catalog",
    "Handoff",
    "KilledWorkerError",
    "MessageKeyError",
    "NoWorkersError",
    "NodeFailedError",
    "OutputUnavailableError",
    "PlanRun",
    "Progress",
    "RedisKeys",
    "Registry",
    "RunCancelledError",
    "RunDeadlineError",
    "RunError",
    "RunStateLostError",
    "RunStatus",
    "RunTimeoutError",
    "Settings",
    "StudyRun",
    "app",
    "call_node",
    "create_app",
    "default_catalog",
    "live_workers",
    "load_catalog_modules",
    "node",
    "queue_name",
    "run_local",
    "settings_of",
    "submit_plan",
    "submit_study",
]
