"""Everything known about one run, read from Redis in one place.

The timeline, the dashboard and the Soma export all draw on the same three
things: the run's status (``PlanRun.status()``), its history
(:mod:`somatize_tasks.runtime.state.history`) and the plan and parameters it was submitted
with. Reading them here keeps those three views consistent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from redis import Redis

from somatize_tasks.config.connections import reaching_redis, redis_client
from somatize_tasks.config.keys import RedisKeys
from somatize_tasks.config.settings import Settings
from somatize_tasks.runtime.producer.handle import PlanRun, RunStatus
from somatize_tasks.runtime.state.history import read_events
from somatize_tasks.runtime.state.packing import unpack


@dataclass
class RunRecord:
    status: RunStatus
    history: list[dict[str, Any]] = field(default_factory=list)
    plan: Any = None
    params: Any = None


def read_run(settings: Settings, run_id: str, client: Redis[bytes] | None = None) -> RunRecord:
    """The run's status, history, plan and params; an unknown run raises ``RunStateLostError``."""
    status = PlanRun.attach(run_id, settings).status()
    client = client or redis_client(settings)
    keys = RedisKeys(settings.key_prefix)

    def more() -> tuple[list[dict[str, Any]], list[bytes | None]]:
        return (
            read_events(client, keys, run_id),
            client.hmget(keys.run(run_id), ["plan", "params"]),
        )

    history, (plan, params) = reaching_redis(settings, more)
    return RunRecord(
        status,
        history,
        json.loads(unpack(plan)) if plan else None,
        json.loads(unpack(params)) if params else None,
    )
