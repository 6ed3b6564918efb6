"""Plans the runtime tests run, in Soma's wire form, with their expected outputs."""

from __future__ import annotations

from typing import Any


def ex(node_id: str) -> dict[str, Any]:
    return {"Execute": {"node_id": node_id}}


def seq(*steps: Any) -> dict[str, Any]:
    return {"Sequence": list(steps)}


def par(*branches: Any) -> dict[str, Any]:
    return {"Parallel": list(branches)}


def remote(tag: str, plan: dict[str, Any]) -> dict[str, Any]:
    inner = plan.get("Execute", {}).get("node_id", "remote")
    return {"Remote": {"node_id": inner, "target": {"Tag": tag}, "plan": plan}}


MAKE_SUM = sum(i * 0.5 for i in range(400))  # rt_make's default output, summed

# A fork-join: make on one worker, two branches (one pinned to the gpu tag), join.
FORK_JOIN = seq(
    ex("rt_make"),
    par(remote("gpu", seq(ex("rt_scale"), ex("rt_sum"))), seq(ex("rt_sum_2"))),
    ex("rt_join"),
)
FORK_JOIN_OPS = {"rt_sum_2": "rt_sum"}
FORK_JOIN_OUTPUT = {"keys": ["rt_sum", "rt_sum_2"], "total": 3 * MAKE_SUM}

LOOP = {
    "Loop": {
        "node_id": "count_up",
        "body": seq(ex("rt_add"), ex("rt_done")),
        "max_iterations": 10,
        "until": {"type": "WhenSignaled", "node": "rt_done"},
        "carry_from": "rt_add",
    }
}

BRANCH = {
    "Branch": {
        "node_id": "rt_label",
        "arms": [["big", ex("rt_double")], ["small", ex("rt_negate")]],
    }
}

STEP = {
    "Step": {
        "node_id": "rt_route",
        "handoffs": [["double", ex("rt_double")], ["negate", ex("rt_negate")]],
    }
}

STREAM = {"Stream": {"node_ids": ["rt_chunk_sum", "rt_scale"], "chunk_size": 2}}
COMPOSITE = {"Composite": {"node_ids": ["rt_mean_centre", "rt_scale"]}}
