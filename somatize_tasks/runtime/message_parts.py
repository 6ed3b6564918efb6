"""How a dispatched block looks on the wire and in Flower: names, argument text,
time limits and how ready blocks are cut into messages (for the dispatcher)."""

from __future__ import annotations

import math
from typing import Any

#: A worker's ready blocks go out in at least this many messages (when there are
#: that many), so a batch never leaves its worker's other slots idle.
BATCH_SPREAD = 4


def node_shadow(nodes: list[str]) -> str:
    """The name Flower lists a node task under (``node:train_svm``, ``node:a+b`` for
    a block or batch of several, ``node:a+b+c+5 more`` past four); the task itself
    stays ``somatize.node.run`` (or ``.batch``), so routing never depends on it."""
    shown = nodes if len(nodes) <= 4 else [*nodes[:3], f"{len(nodes) - 3} more"]
    return "node:" + "+".join(shown)


def scaled(
    limits: tuple[float | None, float | None], nodes: int
) -> tuple[float | None, float | None]:
    """Per-node time limits for a task that runs ``nodes`` nodes (a fused chain)."""
    return tuple(None if limit is None else limit * nodes for limit in limits)  # type: ignore[return-value]


def split(items: list[Any], most: int) -> list[list[Any]]:
    """``items`` in about equal batches of at most ``most``, at least ``BATCH_SPREAD``
    of them when there are that many items."""
    count = min(len(items), max(math.ceil(len(items) / most), BATCH_SPREAD))
    size = math.ceil(len(items) / count)
    return [items[i : i + size] for i in range(0, len(items), size)]


def describe(run_id: str, nodes: list[str], epoch: int) -> str:
    """What Flower shows for a node task's arguments: ids, never values."""
    shown = nodes[0] if len(nodes) == 1 else "+".join(nodes[:8])
    if len(nodes) > 8:
        shown += f" (+{len(nodes) - 8} more)"
    suffix = f" pass={epoch}" if epoch else ""
    return f"run={run_id} node={shown}{suffix}"
