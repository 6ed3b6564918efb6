"""Every error ``somatize_tasks`` raises on purpose, in one place, under one root.

    SomatizeError                   root: catch this to catch everything below
    ├── ConfigError                 a setting is missing or malformed (ValueError)
    │   └── MessageKeyError         the workers would refuse this producer's messages
    ├── CatalogError                the node catalog cannot serve a request
    │   ├── UnknownNodeError        no entry of that name on this worker (LookupError)
    │   ├── DuplicateNodeError      two different callables claim one name (ValueError)
    │   └── NodeParamsError         a run's parameters do not fit the node (TypeError)
    ├── PlanInputError              params or ops do not fit the plan (ValueError)
    ├── PlanBuildError              a plan built in Python is malformed (ValueError)
    ├── BundleError                 a Soma checkpoint bundle cannot be read or run (ValueError)
    │   └── ModuleNotAllowedError   a class_path outside SOMATIZE_ALLOWED_MODULES
    ├── ControlFlowError            a node's output cannot steer the plan (ValueError)
    ├── RunModeError                mode, y and states_from do not fit (ValueError)
    ├── StatesError                 states to run forward with cannot be read (ValueError)
    ├── MissingStateError           a forward run has no state for a trainable filter
    ├── CodecError                  a value cannot be encoded or decoded (TypeError)
    ├── NoWorkersError              require_workers and no live worker can take the plan
    ├── TransferFailedError         a value could not reach the worker that needs it
    ├── ClusterError                a local cluster could not start, or a part stopped
    ├── CacheError                  the content cache cannot do what was asked (ValueError)
    ├── StudyError                  a study's space, objective or record is malformed (ValueError)
    ├── DuplicateWorkerIdError      another live process already works under this id
    ├── StrandedError               a dead worker's node cannot be re-placed yet
    ├── ArtifactError               the artifact store cannot serve a request
    │   ├── ArtifactIdError         a run, node or worker id is unsafe as a key (ValueError)
    │   ├── ArtifactMissingError    a value is neither inline, cached nor shared (LookupError)
    │   ├── ArtifactCorruptError    a stored value's size is not what its ref says
    │   ├── DiskFullError           no space left to write a value to a local disk
    │   ├── PeerTransferError       a value could not be pulled from the worker holding it
    │   │   └── GrantRefusedError   a holder refused a pull: no, a bad or an expired grant
    │   └── StoreError              the shared store failed (names endpoint and bucket)
    │       └── StoreUnavailableError   the store cannot be reached: retry later
    └── RunError                    a run did not produce its output
        ├── RedisUnreachableError   Redis did not answer: the run cannot be followed now
        ├── RunStillRunningError    asked of a run that has not ended
        ├── OutputUnavailableError  a node's output cannot be read (TimeoutError)
        ├── RunCancelledError       cancelled before it finished
        ├── RunStateLostError       Redis no longer has the run
        ├── RunTimeoutError         wait(timeout=...) ran out (TimeoutError)
        └── NodeFailedError         a node raised: names node, worker, remote traceback
            └── RunEndedByReaperError   the reaper ended the run; the message says why
                ├── KilledWorkerError   a node killed its worker max_node_deaths times
                ├── RunDeadlineError    the run's deadline_s passed
                └── RunBudgetError      the run's loops made max_passes passes

Every error takes its message as its only positional argument, so Celery's
JSON result backend can rebuild it on the producer's side; the structured
details are keyword-only attributes for callers in the same process.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.errors import listing


class SomatizeError(Exception):
    """Root of every error somatize_tasks raises on purpose."""


class ConfigError(SomatizeError, ValueError):
    """A setting is missing or malformed; the message names the setting."""


class MessageKeyError(ConfigError):
    """The workers a run was placed on would refuse this producer's messages."""


class CatalogError(SomatizeError):
    """The node catalog cannot serve a request."""


class UnknownNodeError(CatalogError, LookupError):
    """A node name the worker's catalog does not hold.

    The message names the node, the worker and what the catalog holds, so
    the producer can tell a typo from a worker started with the wrong
    ``--nodes``.
    """

    def __init__(
        self,
        message: str,
        *,
        node: str | None = None,
        worker_id: str | None = None,
        available: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.node = node
        self.worker_id = worker_id
        self.available = tuple(available)

    @classmethod
    def for_node(
        cls, node: str, worker_id: str | None, available: Sequence[str]
    ) -> UnknownNodeError:
        where = f"worker '{worker_id}'" if worker_id else "this process"
        held = listing(sorted(available)) or "nothing (was it started with --nodes?)"
        return cls(
            f"node '{node}' is not in the catalog of {where}; it holds: {held}",
            node=node,
            worker_id=worker_id,
            available=available,
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_unknown_node, (str(self), self.node, self.worker_id, self.available))


def _rebuild_unknown_node(
    message: str, node: str | None, worker_id: str | None, available: Sequence[str]
) -> UnknownNodeError:
    return UnknownNodeError(message, node=node, worker_id=worker_id, available=available)


class DuplicateNodeError(CatalogError, ValueError):
    """Two different callables were registered under one catalog name."""


class NodeParamsError(CatalogError, TypeError):
    """The parameters a run gives a node do not match its signature."""


class PlanInputError(SomatizeError, ValueError):
    """``params`` or ``ops`` are malformed or name a node the plan does not have."""


class PlanBuildError(SomatizeError, ValueError):
    """A plan built with :mod:`somatize_tasks.authoring` cannot be written."""


class BundleError(SomatizeError, ValueError):
    """A Soma checkpoint bundle (``Graph.save``'s zip) cannot be read, written or run."""


class ModuleNotAllowedError(BundleError, CatalogError):
    """A node's ``class_path`` is outside the module prefixes this process allows."""


class CodecError(SomatizeError, TypeError):
    """No codec can encode a value (the message names its type), or decoding failed."""


class ArtifactError(SomatizeError):
    """The artifact store cannot serve a request."""


class ArtifactIdError(ArtifactError, ValueError):
    """An id would make a storage key or path escape its prefix."""


class ArtifactMissingError(ArtifactError, LookupError):
    """A value is not inline, not in the local cache and not in the shared store."""


class ArtifactCorruptError(ArtifactError):
    """A stored value's size differs from the size its ref records."""


class DiskFullError(ArtifactError):
    """No space left on a local disk (the RAM directory, the cache, or a shared
    directory): the message names the node, the worker, the tier and the path, and
    says "no space left". ``tier`` and ``path`` say where (when known)."""

    def __init__(self, message: str, *, tier: str | None = None, path: str | None = None) -> None:
        super().__init__(message)
        self.tier = tier
        self.path = path


class PeerTransferError(ArtifactError):
    """A direct pull from the worker holding a value failed (unreachable, refused, cut
    short, a size or digest that does not match); ``auto`` transfers fall back to S3."""


class GrantRefusedError(PeerTransferError):
    """The holder refused a pull: the grant was missing, forged, expired or for another
    value, or the request was malformed."""


class StoreError(ArtifactError):
    """The shared store failed; the message names its endpoint and bucket, never a secret."""


class StoreUnavailableError(StoreError):
    """The shared store could not be reached; transfer tasks retry these with backoff."""


class RunError(SomatizeError):
    """A run did not produce its output (Redis unreachable, a node failed, cancelled...)."""


class RedisUnreachableError(RunError):
    """Redis did not answer (names the server, its password masked)."""


class RunStillRunningError(RunError):
    """An action that needs an ended run (``forget``) was asked of a running one."""


class OutputUnavailableError(RunError, TimeoutError):
    """A node's output cannot be read here: only its worker's cache held it and that
    worker is gone, or the worker did not hand it over within the caller's timeout.

    A ``TimeoutError`` too, so callers that caught Celery's bare one still work.
    """

    def __init__(self, message: str, *, node_id: str = "", worker_id: str = "") -> None:
        super().__init__(message)
        self.node_id = node_id
        self.worker_id = worker_id

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_output_unavailable, (str(self), self.node_id, self.worker_id))


def _rebuild_output_unavailable(
    message: str, node_id: str, worker_id: str
) -> OutputUnavailableError:
    return OutputUnavailableError(message, node_id=node_id, worker_id=worker_id)


class MissingStateError(SomatizeError, LookupError):
    """A forward run reached a trainable filter with no fitted state to use."""


class ControlFlowError(SomatizeError, ValueError):
    """A node's output cannot steer the plan the way its place in it needs."""


class RunModeError(SomatizeError, ValueError):
    """``mode``, ``y`` and ``states_from`` do not fit together, or the plan cannot run so."""


class StatesError(SomatizeError, ValueError):
    """States to run forward with cannot be found or read."""


class NoWorkersError(SomatizeError):
    """``require_workers=True`` and no live worker could take the plan.

    ``reason`` is why, without the hint, so the CLI can name its own flag.
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(
            f"{reason}. Start a worker (somatize-tasks worker --tags ...) or submit "
            "without require_workers=True to run the plan in this process."
        )


class TransferFailedError(SomatizeError):
    """A value could not be moved to the worker that needs it (after retries)."""


class ClusterError(SomatizeError):
    """A local cluster could not start, or a part of it stopped."""


class CacheError(SomatizeError, ValueError):
    """The content cache cannot do what was asked: a pin naming no entry, a bad size."""


class StudyError(SomatizeError, ValueError):
    """A study's search space, objective or record is malformed; the message names the field."""


class DuplicateWorkerIdError(SomatizeError):
    """A worker starting under an id another live process heartbeats as."""

    @classmethod
    def for_worker(cls, worker_id: str, other: str) -> DuplicateWorkerIdError:
        return cls(
            f"worker id '{worker_id}' is already used by a live worker ({other}); two "
            "processes under one id would both take its messages. Give this worker "
            "another id (--worker-id or SOMATIZE_WORKER_ID), or stop the other one first"
        )


class StrandedError(SomatizeError):
    """A node cannot be re-placed yet (no live worker satisfies its target)."""


class NodeFailedError(RunError):
    """A node raised; the message names the node, its worker and the remote traceback."""

    def __init__(self, run_id: str, detail: dict[str, Any]) -> None:
        self.run_id = run_id
        self.node_id = str(detail.get("node_id"))
        self.worker_id = str(detail.get("worker_id"))
        self.remote_traceback = str(detail.get("traceback", ""))
        where = (
            ""
            if detail.get("node_id") is None
            else (f"node '{self.node_id}' on worker '{self.worker_id}' raised ")
        )
        shown = f"\n\nRemote traceback:\n{self.remote_traceback}" if self.remote_traceback else ""
        super().__init__(
            f"run {run_id} failed: {where}{detail.get('type')}: {detail.get('message')}{shown}"
        )


class RunEndedByReaperError(NodeFailedError):
    """The reaper ended the run (not a node raising): the message says why."""

    def __init__(self, run_id: str, detail: dict[str, Any]) -> None:
        super().__init__(run_id, detail)
        self.args = (f"run {run_id} failed: {detail.get('message')}",)

    def __str__(self) -> str:
        return str(self.args[0])


class KilledWorkerError(RunEndedByReaperError):
    """A node's worker died while running it ``max_node_deaths`` times (Dask's
    ``KilledWorker``); ``node_id`` names it, ``worker_id`` the workers, comma-separated."""


class RunDeadlineError(RunEndedByReaperError):
    """The run's ``deadline_s`` passed; the message names what was still unfinished."""


class RunBudgetError(RunEndedByReaperError):
    """The run's loops used up its budget of passes (``max_passes``); the message
    names the loop that would have gone on."""


class RunCancelledError(RunError):
    """The run was cancelled before it finished."""


class RunStateLostError(RunError):
    """Redis no longer has the run (expired, flushed, or Redis restarted without persistence)."""


class RunTimeoutError(RunError, TimeoutError):
    """``wait(timeout=...)`` ran out before the run ended."""


class RunStateTamperedError(RunError):
    """A value in a run's Redis state fails its MAC: written by someone without the key."""
