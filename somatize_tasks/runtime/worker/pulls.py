"""``somatize.transfer.pull``: a value pulled straight from the worker that holds it.

Published to the target worker's queue as the whole transfer chain of one
missing input (:mod:`~somatize_tasks.runtime.engine.transfer_chains`). It
looks up where the holder serves (:mod:`somatize_tasks.workers.peers`),
pulls the value into this worker's cache (:mod:`somatize_tasks.transfer.peer_pull`:
a grant for that one value, size, digest and tag checked), and counts the
input arrived itself, as ``input_ready`` would: one message instead of
three (upload, download, ready).

When the pull fails (the holder is dead, unreachable, refuses, or sends
bytes that do not check out) and ``SOMATIZE_TRANSFER`` is ``auto``, the
S3 chain takes its place: its steps replace the pull's in the waiting
block's status (the orphan rule keeps watching the right tasks), the upload
is skipped when the value is in the store already, and its ``input_ready``
records why (``fallback``). With ``direct`` a failed pull is retried like an
unreachable store, then fails the run. A holder that died takes its value
with it either way: the reaper recomputes what a dead worker held.

Fencing: the ref names the recorded attempt; the grant names it too, and the
holder serves only that attempt's file, so a stale execution's value is
never pulled.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from celery import Task, shared_task

from somatize_tasks.config.keys import TRANSFER_PULL_TASK
from somatize_tasks.errors import DiskFullError, PeerTransferError, StoreError
from somatize_tasks.messaging.celery_app import settings_of
from somatize_tasks.runtime.engine.context import RunContext, run_context
from somatize_tasks.runtime.engine.transfer_chains import TransferChain
from somatize_tasks.runtime.worker.tasks import arrive, engine_for, retrying
from somatize_tasks.store import ArtifactRef
from somatize_tasks.transfer.peer_pull import pull_value
from somatize_tasks.transfer.tasks import backoff_s
from somatize_tasks.workers.peers import read_peers

log = logging.getLogger(__name__)


@shared_task(bind=True, name=TRANSFER_PULL_TASK, ignore_result=True)
def pull(
    self: Task[Any, Any], run_id: str, block: int, epoch: int, ref: dict[str, Any], task_id: str
) -> None:
    """Bring ``ref`` here from its holder and count it arrived for ``block``."""
    context = run_context(self.app, settings_of(self.app))
    step_id = self.request.id or ""

    def attempt() -> None:
        began = time.perf_counter()
        try:
            how = bring(context, ArtifactRef.model_validate(ref))
        except (PeerTransferError, DiskFullError) as exc:
            if context.settings.transfer == "direct" or isinstance(exc, DiskFullError):
                raise
            fall_back(context, run_id, block, epoch, ref, task_id, step_id, str(exc))
            return
        took = {"seconds": round(time.perf_counter() - began, 4)}
        arrive(context, run_id, block, epoch, ref, task_id, step_id, kind=how, extra=took)

    try:
        retrying(context, f"run {run_id} pull for block {block}", attempt)
    except PeerTransferError as exc:  # SOMATIZE_TRANSFER=direct: no S3 to fall back on
        raise self.retry(
            exc=exc,
            countdown=backoff_s(self.request.retries, context.settings),
            max_retries=context.settings.transfer_max_retries,
        ) from None


def bring(context: RunContext, ref: ArtifactRef) -> str:
    """Pull ``ref`` into this worker's cache unless it is here; how it came
    (``peer``, or ``cached`` when nothing had to move)."""
    store = context.store
    if store.has_local(ref):
        return "cached"
    holder = ref.worker_id or ""
    peer = read_peers(context.redis, context.keys, [holder]).get(holder)
    if peer is None or peer.address is None:
        raise PeerTransferError(f"worker '{holder}' serves no values now (no address announced)")
    pull_value(store, ref, peer.address, context.settings)
    return "peer"


def fall_back(
    context: RunContext,
    run_id: str,
    bid: int,
    epoch: int,
    ref: dict[str, Any],
    task_id: str,
    step_id: str,
    reason: str,
) -> None:
    """Send the value through S3 instead: the S3 chain replaces this pull."""
    found = engine_for(context, run_id)
    if found is None:
        return
    engine, dispatcher = found
    block = engine.program.blocks[bid]
    artifact = ArtifactRef.model_validate(ref)
    try:
        in_store = context.store.shared.exists(artifact.key, artifact.size)
    except StoreError:  # the upload step finds out again, and retries an outage
        in_store = False
    chain = TransferChain.plan(ref, context.worker_id, upload=not in_store)
    chain = TransferChain(chain.ref, chain.target, chain.steps, fallback=reason[:300])
    nodes = block.task_node_ids()
    if not dispatcher.state.swap_chain_step(nodes, task_id, step_id, chain.watched()):
        return  # the block was re-dispatched or the run ended: nothing waits for this
    log.warning(
        "run %s: the direct transfer of %s to %s failed (%s); sending it through S3",
        run_id,
        artifact.node_id,
        "+".join(nodes),
        reason,
    )
    chain.signature(context.app, run_id, block, epoch, task_id).apply_async()
