"""What a dead dispatcher recorded but never published: the outbox.

Every dispatch is recorded with an outbox entry (``<p>:run:<id>:outbox``)
that is cleared once its messages are out. An entry older than
:func:`outbox_grace` means the process that dispatched died between
recording and publishing (a worker killed just after a completion, a
producer killed mid-publish): its blocks, if still pending under the
entry's task id, are dispatched again under new task ids.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from somatize_tasks.runtime.program import Program
from somatize_tasks.runtime.redis_state import RedisRunState


def outbox_grace(settings: Any) -> float:
    """How long a recorded dispatch may stay unconfirmed before it counts as lost."""
    return float(max(5.0, 2 * settings.heartbeat_ttl_s, 4 * settings.heartbeat_interval_s))


def unsent_blocks(
    state: RedisRunState, load: Callable[[], Program | None], nodes: dict[str, dict[str, Any]],
    grace_s: float,
) -> tuple[Program | None, list[tuple[int, int]]]:  # fmt: skip
    """The blocks of old outbox entries still pending under the entry's task id (the
    others ran after all, or were dispatched again since: the outbox forgets them),
    with the run's program (``load``ed only when there are old entries)."""
    before = time.time() - grace_s
    old = {k: e for k, e in state.unsent().items() if e["at"] < before}
    program = load() if old else None
    if program is None:
        return None, []
    unsent = [
        (bid, epoch) for (bid, epoch), entry in old.items()
        if any(nodes.get(n, {}).get("state") == "pending"
               and nodes[n].get("task_id") == entry["task_id"]
               for n in program.blocks[bid].task_node_ids())
    ]  # fmt: skip
    state.sent([key for key in old if key not in unsent])
    return program, sorted(unsent)
