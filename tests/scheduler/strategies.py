"""Hypothesis strategies: random plans (all ten variants, nested) and worker sets.

A plan is drawn as a *shape* (a nested tuple without ids) and then written
out as Soma's wire JSON with unique ids numbered in walk order, so every
drawn plan is valid: unique ids and labels, Loop bodies that name at least
one node, ``until.node`` and ``carry_from`` taken from the body, and an
``Exhaust`` loop always bounded.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import strategies as st

TAGS = ("gpu", "cpu", "big")
WORKER_IDS = tuple(f"w{i}" for i in range(6))

Shape = tuple[Any, ...]

_leaf: st.SearchStrategy[Shape] = st.one_of(
    st.just(("Execute",)),
    st.just(("Empty",)),
    st.tuples(st.just("Composite"), st.integers(1, 3)),
    st.tuples(st.just("Stream"), st.integers(1, 3), st.integers(1, 512)),
)


def _extend(children: st.SearchStrategy[Shape]) -> st.SearchStrategy[Shape]:
    many = st.lists(children, max_size=4)
    target = st.one_of(
        st.tuples(st.just("Tag"), st.sampled_from(TAGS)),
        st.tuples(st.just("WorkerId"), st.sampled_from(WORKER_IDS)),
    )
    return st.one_of(
        st.tuples(st.just("Sequence"), many),
        st.tuples(st.just("Parallel"), many),
        st.tuples(st.just("Step"), st.lists(children, max_size=2)),
        st.tuples(st.just("Branch"), st.lists(children, max_size=3)),
        st.tuples(st.just("Remote"), target, children),
        st.tuples(
            st.just("Loop"),
            children,
            st.sampled_from(("BodyTerminal", "WhenSignaled", "Exhaust")),
            st.one_of(st.none(), st.integers(0, 5)),
            st.booleans(),
        ),
    )


shapes: st.SearchStrategy[Shape] = st.recursive(_leaf, _extend, max_leaves=18)


def materialize(shape: Shape) -> dict[str, Any] | str:
    """The wire JSON of ``shape`` with ids n0, n1, ... in Soma's node_ids() order."""
    counter = itertools.count()
    return _write(shape, counter)


def _write(shape: Shape, counter: itertools.count[int]) -> Any:
    kind = shape[0]
    if kind == "Execute":
        return {"Execute": {"node_id": f"n{next(counter)}"}}
    if kind == "Empty":
        return "Empty"
    if kind == "Composite":
        return {"Composite": {"node_ids": [f"n{next(counter)}" for _ in range(shape[1])]}}
    if kind == "Stream":
        ids = [f"n{next(counter)}" for _ in range(shape[1])]
        return {"Stream": {"node_ids": ids, "chunk_size": shape[2]}}
    if kind in ("Sequence", "Parallel"):
        return {kind: [_write(child, counter) for child in shape[1]]}
    if kind in ("Step", "Branch"):
        node_id = f"n{next(counter)}"
        pairs = [[f"l{i}", _write(child, counter)] for i, child in enumerate(shape[1])]
        if kind == "Step":
            body: dict[str, Any] = {"node_id": node_id}
            if pairs:
                body["handoffs"] = pairs
            return {"Step": body}
        return {"Branch": {"node_id": node_id, "arms": pairs}}
    if kind == "Remote":
        (target_kind, target_value), child = shape[1], shape[2]
        return {
            "Remote": {
                "node_id": f"remote{next(counter)}",
                "target": {target_kind: target_value},
                "plan": _write(child, counter),
            }
        }
    assert kind == "Loop"
    _, child, until, max_iterations, carry = shape
    node_id = f"n{next(counter)}"
    anchor = f"n{next(counter)}"
    body = {"Sequence": [{"Execute": {"node_id": anchor}}, _write(child, counter)]}
    if until == "Exhaust" and max_iterations is None:
        max_iterations = 3
    loop: dict[str, Any] = {"node_id": node_id, "body": body, "max_iterations": max_iterations}
    if until == "WhenSignaled":
        loop["until"] = {"type": "WhenSignaled", "node": anchor}
    elif until == "Exhaust":
        loop["until"] = {"type": "Exhaust"}
    if carry:
        loop["carry_from"] = anchor
    return {"Loop": loop}


plans: st.SearchStrategy[Any] = shapes.map(materialize)


@st.composite
def worker_sets(draw: st.DrawFn, min_size: int = 0, max_size: int = 6) -> list[dict[str, Any]]:
    """Worker heartbeats as JSON: unique ids from ``WORKER_IDS``, in a random order."""
    ids = draw(
        st.lists(st.sampled_from(WORKER_IDS), min_size=min_size, max_size=max_size, unique=True)
    )
    return [
        {
            "id": worker_id,
            "name": f"name-{worker_id}",
            "tags": draw(st.lists(st.sampled_from(TAGS), unique=True, min_size=1, max_size=2)),
            "gpu": draw(st.booleans()),
            "cpu_cores": draw(st.integers(1, 64)),
            "active_jobs": draw(st.one_of(st.just(0), st.integers(0, 4))),
            "max_concurrent": draw(st.one_of(st.integers(1, 5), st.just(0))),
        }
        for worker_id in ids
    ]
