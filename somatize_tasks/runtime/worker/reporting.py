"""A trial's reports, from the node that makes them to its study's driver and back.

``report(name, value, step)`` in node code (:mod:`somatize_tasks.catalog.trial`)
pushes the metric onto the study's ``reports`` list in Redis and waits, a few
seconds at most, for the driver's verdict under a key of its own: ``stop``
when the pruner says so. A trial the pruner already stopped gets True at once;
a driver that does not answer (it died; ``study --resume`` brings it back)
means go on, never a failed node.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any

from redis import Redis
from redis.exceptions import RedisError

from somatize_tasks.config.keys import RedisKeys
from somatize_tasks.runtime.engine.context import RunContext

log = logging.getLogger(__name__)
#: How long a report waits for the driver's verdict before it goes on.
VERDICT_WAIT_S = 5.0
STOP, GO = b"stop", b"go"


class TrialReporter:
    """Reports of one trial run (``trial``: the run's ``{"study", "number", ...}``)."""

    def __init__(
        self,
        redis: Redis[bytes],
        keys: RedisKeys,
        trial: dict[str, Any],
        run_id: str,
        ttl_s: int,
        wait_s: float = VERDICT_WAIT_S,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.study = str(trial["study"])
        self.number = int(trial["number"])
        self.run_id = run_id
        self.ttl_s = ttl_s
        self.wait_s = wait_s

    def __call__(self, node_id: str, name: str, value: float, step: int) -> bool:
        report_id = uuid.uuid4().hex
        message = {
            "id": report_id,
            "trial": self.number,
            "run_id": self.run_id,
            "node_id": node_id,
            "name": name,
            "value": value,
            "step": step,
            "at": time.time(),
        }
        reports = self.keys.study(self.study, "reports")
        try:
            if self.redis.sismember(self.keys.study(self.study, "pruned"), self.number):
                return True
            pipe = self.redis.pipeline()
            pipe.rpush(reports, json.dumps(message))
            pipe.expire(reports, self.ttl_s)
            pipe.execute()
            answer = self.redis.blpop(
                [self.keys.study(self.study, f"verdict:{report_id}")], timeout=self.wait_s
            )
        except RedisError as exc:
            log.warning("trial %d: report %s not delivered: %s", self.number, name, exc)
            return False
        return answer is not None and answer[1] == STOP


def reporter_for(
    context: RunContext, trial: dict[str, Any] | None, run_id: str
) -> TrialReporter | None:
    """Where a study trial's ``report(...)`` calls go (None outside a study)."""
    if trial is None:
        return None
    return TrialReporter(context.redis, context.keys, trial, run_id, context.settings.run_ttl_s)
