"""Forgetting an ended run now: its state leaves Redis and its values leave every store.

Without it a run's state and files stay until ``run_ttl_s`` (a week by
default) after it ends, bounded only by the RAM tier's budget and the
collectors. ``PlanRun.forget()`` (Celery users know ``AsyncResult.forget()``)
and ``somatize-tasks forget`` drop them as soon as the caller has what it
needs: RAM and disk come back at once, and the next large values are
written over its RAM files rather than into fresh memory (store.spares).

What goes: the run's keys, its values in the shared store (S3 or the
shared directory), in this machine's RAM tier and in the caches of every
worker on this machine; other machines' caches go with their sweep once
``run_ttl_s`` has passed. Its entry in the runs index stays, dated now, so
the run collector looks at the run again a TTL later and deletes what came
after: the output of a node still running when its run was cancelled, say,
or files left by an interrupted ``forget``. Arrays already read stay valid:
a file someone still maps is unlinked, never recycled.

A forward run that reads this run's fitted states (``states_from``) cannot
read them once it is forgotten: forget a fit run only when no run uses it.
"""

from __future__ import annotations

import shutil

from somatize_tasks.config.clock import redis_now
from somatize_tasks.errors import RunStillRunningError
from somatize_tasks.runtime.engine.context import RunContext
from somatize_tasks.runtime.state.run_state import FINAL_STATES
from somatize_tasks.store import key_part
from somatize_tasks.store.gc import cache_roots


def forget_run(context: RunContext, run_id: str) -> bool:
    """Delete an ended run's state and values now; False if Redis did not know it.

    Raises :class:`RunStillRunningError` for a run still running: its workers
    would write again what was just deleted.
    """
    keys, client = context.keys, context.redis
    status = client.hget(keys.run(run_id), "status")
    if status is None:
        return False
    if status.decode() not in FINAL_STATES:
        raise RunStillRunningError(
            f"run {run_id} is still running, so it cannot be forgotten yet: wait for it, "
            f"or cancel it first (run.cancel(), or `somatize-tasks cancel {run_id}`)"
        )
    pipe = client.pipeline(transaction=False)
    pipe.delete(*keys.run_keys(run_id))
    pipe.srem(keys.active_runs, run_id)
    pipe.zadd(keys.runs, {run_id: redis_now(client)})  # collected again a TTL from now
    pipe.execute()
    context.store.delete_run(run_id)
    run_dir = key_part("run id", run_id)
    for cache in cache_roots(context.settings.cache_dir):
        shutil.rmtree(cache / run_dir, ignore_errors=True)
    return True
