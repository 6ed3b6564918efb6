"""somatize_tasks: run Soma execution plans on Celery workers.

``app`` is the default Celery app (``celery -A somatize_tasks worker``); its
settings are read from ``SOMATIZE_*`` the first time it is configured.
"""

from somatize_tasks.catalog.entries import (
    Catalog,
    call_node,
    default_catalog,
    load_catalog_modules,
    node,
)
from somatize_tasks.catalog.trial import current_seed, current_trial, report
from somatize_tasks.config.keys import RedisKeys, queue_name
from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import (
    KilledWorkerError,
    MessageKeyError,
    NodeFailedError,
    NoWorkersError,
    OutputUnavailableError,
    RunCancelledError,
    RunDeadlineError,
    RunError,
    RunStateLostError,
    RunTimeoutError,
)
from somatize_tasks.messaging.celery_app import create_app, settings_of
from somatize_tasks.runtime.compile.control import Handoff
from somatize_tasks.runtime.producer.handle import PlanRun, Progress, RunStatus
from somatize_tasks.runtime.producer.local import run_local
from somatize_tasks.runtime.producer.submit import submit_plan
from somatize_tasks.runtime.producer.trials import StudyRun
from somatize_tasks.study.api import StudyHandle, submit_study
from somatize_tasks.workers import boot as worker_boot  # noqa: F401  (connects the worker start-up hook)
from somatize_tasks.workers.registry import Registry, live_workers

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
    "StudyHandle",
    "StudyRun",
    "app",
    "call_node",
    "create_app",
    "current_seed",
    "current_trial",
    "default_catalog",
    "live_workers",
    "load_catalog_modules",
    "node",
    "queue_name",
    "report",
    "run_local",
    "settings_of",
    "submit_plan",
    "submit_study",
]
