"""What a finished run keeps in Redis: well under 1 KB a node (issue #10), all still readable.

Counted as ``bench/bench_size.py`` counts it: every key of the run, each by
``MEMORY USAGE key SAMPLES 0`` (exact). Before the run's logs were folded into
its meta (:mod:`somatize_tasks.runtime.state.archive`) a finished fork-join kept
~930 bytes a node; with them folded (and its plan compressed) ~500.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from redis import Redis

from scheduler import ExecutionPlan
from somatize_tasks.config.keys import RedisKeys
from somatize_tasks.config.settings import Settings
from somatize_tasks.observe.run_record import read_run
from somatize_tasks.runtime.producer.handle import PlanRun
from somatize_tasks.runtime.producer.submit import submit_plan
from somatize_tasks.runtime.state.archive import FIELDS, fold_logs
from somatize_tasks.runtime.state.history import attempts, read_events
from testkit.plans import ex, par, seq
from testkit.services import wait_for
from testkit.workers import WorkerProcess

pytestmark = pytest.mark.slow
Workers = tuple[WorkerProcess, WorkerProcess]
N = 150
#: The goal is 1 KB a node; the bound keeps a margin a regression would eat first.
MAX_BYTES_PER_NODE = 800


def adds(n: int) -> list[dict[str, Any]]:
    return [ex(f"rt_add_{i + 2}") for i in range(n)]


SHAPES = {  # name -> (plan, fuse chains, output from input 0)
    "fork-join": (
        seq(ex("rt_add"), par(*adds(N)), ex("rt_join")),
        True,
        {"keys": sorted(f"rt_add_{i + 2}" for i in range(N)), "total": 2.0 * N},
    ),
    "unfused chain": (seq(ex("rt_add"), *adds(N - 1)), False, float(N)),
}


def run_bytes(client: Redis[bytes], prefix: str, run_id: str) -> dict[str, int]:
    base = f"{prefix}:run:{run_id}"
    return {
        key.decode()[len(base) + 1 :] or "meta": int(client.memory_usage(key, samples=0) or 0)
        for key in client.scan_iter(match=f"{base}*", count=1000)
    }


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_finished_run_keeps_under_1_kb_a_node_and_shows_everything(
    settings: Settings, two_workers: Workers, shape: str
) -> None:
    plan, fuse, output = SHAPES[shape]
    run = submit_plan(
        plan,
        input=0,
        settings=settings.model_copy(update={"fuse_chains": fuse}),
        require_workers=True,
    )
    assert run.wait(timeout=120) == output
    client = run._context.redis
    # The run's last worker folds its logs right after the run's end.
    assert wait_for(lambda: not client.exists(run._state.history), 10)
    sizes = run_bytes(client, settings.key_prefix, run.id)
    per_node = sum(sizes.values()) / run.progress().total
    assert per_node <= MAX_BYTES_PER_NODE, (per_node, sizes)
    assert not client.exists(run._state.transfers)
    assert set(FIELDS.values()) <= {f.decode() for f in client.hkeys(run._state.meta)}
    assert all(client.hget(run._state.meta, f).startswith(b"zlib:") for f in ("plan", "node_ids"))
    program = run._context.program(run.id, refresh=True)  # as a late task reads the plan
    assert program is not None and program.node_count == run.progress().total
    assert read_run(settings, run.id).plan == json.loads(
        ExecutionPlan.model_validate(plan).model_dump_json()
    )

    status = PlanRun.attach(run.id, settings).status()  # as the CLI and dashboard read it
    assert len(status.nodes) == N + (2 if shape == "fork-join" else 0)
    for node in status.nodes.values():
        assert node.state == "done" and node.worker
        assert node.started_at and node.ended_at and node.started_at <= node.ended_at
    assert any(t["from_node"] == "input" for t in status.transfers)
    tried = attempts(read_events(client, RedisKeys(settings.key_prefix), run.id))
    assert {a.node_id for a in tried} == set(status.nodes)
    assert all(a.state == "done" and a.end is not None for a in tried)
    assert run.result(f"rt_add_{N}") == (2.0 if shape == "fork-join" else float(N))


def test_a_line_after_the_fold_is_read_after_the_folded_ones(settings: Settings) -> None:
    """A node still running when its run was cancelled records its failure after the fold."""
    client: Redis[bytes] = Redis.from_url(settings.redis_url)
    keys = RedisKeys(settings.key_prefix)
    run_id = f"fold-{time.time_ns()}"
    meta, history = keys.run(run_id), keys.run(run_id, "history")
    client.hset(meta, "status", "cancelled")
    client.expire(meta, 60)
    client.rpush(history, b'{"at":1,"nodes":["a"],"state":"running"}')
    lists = {FIELDS["history"]: history}
    assert fold_logs(client, meta, lists) == 1
    assert not client.exists(history) and 0 < client.ttl(meta) <= 60
    client.rpush(history, b'{"at":2,"nodes":["a"],"state":"failed","error":"E"}')
    events = read_events(client, keys, run_id)
    assert [(e["at"], e["state"]) for e in events] == [(1, "running"), (2, "failed")]
    assert fold_logs(client, meta, lists) == 1  # folded again: both kept, in order
    assert read_events(client, keys, run_id) == events
    client.delete(meta, history)
