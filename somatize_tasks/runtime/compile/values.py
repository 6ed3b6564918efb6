"""Value expressions: how a node's input is described without carrying it.

A message never holds a large value, only an expression that says where
the value is:

``{"ref": {...ArtifactRef...}}``
    one node output in the artifact store (small ones carry the bytes
    inline, so they need no transfer);
``{"map": {"train_svm": <expr>, "train_knn": <expr>}}``
    a Parallel's output: each branch's terminal node id to its output;
``{"value": <json>}``
    a literal, such as a small run input given by the producer;
``{"graph": {"normalize": <expr>, "__input__": <expr>}}``
    what a task block reads when the run follows a predecessors graph: the
    latest output of every predecessor it reads (and the run's input, for a
    node with none); each node's input is then resolved from it as Soma's
    ``resolve_input`` does (:func:`node_input_expr`).

The worker that runs a node turns the expression into a Python value
(:func:`materialize`), fetching each ref from its cache or the shared store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

Expr = dict[str, Any]
#: The key of the run's own input in a ``graph`` expression (Soma's ``__input__``).
RUN_INPUT = "__input__"
#: Soma's ``Empty``: what a node reads from a predecessor that produced nothing.
NOTHING: Expr = {"value": None}


def ref_expr(ref: Mapping[str, Any]) -> Expr:
    return {"ref": dict(ref)}


def value_expr(value: Any) -> Expr:
    return {"value": value}


def map_expr(items: Mapping[str, Expr]) -> Expr:
    return {"map": dict(items)}


def graph_expr(items: Mapping[str, Expr]) -> Expr:
    return {"graph": dict(items)}


def refs_in(expr: Expr) -> Iterator[dict[str, Any]]:
    """Every artifact ref the expression mentions (depth first)."""
    if "ref" in expr:
        yield expr["ref"]
        return
    for kind in ("map", "graph"):
        if kind in expr:
            for item in expr[kind].values():
                yield from refs_in(item)


def node_input_expr(preds: list[str], available: Mapping[str, Expr]) -> Expr:
    """Soma's ``resolve_input``, over expressions: no predecessor reads the run's
    input, one reads its output (``None`` if it produced nothing), several read
    an object keyed by the predecessors that produced something."""
    if not preds:
        return available.get(RUN_INPUT, NOTHING)
    if len(preds) == 1:
        return available.get(preds[0], NOTHING)
    return map_expr({p: available[p] for p in preds if p in available})


def materialize(expr: Expr, fetch: Callable[[dict[str, Any]], Any]) -> Any:
    """The Python value an expression stands for; ``fetch`` reads one ref."""
    if "ref" in expr:
        return fetch(expr["ref"])
    for kind in ("map", "graph"):
        if kind in expr:
            return {key: materialize(item, fetch) for key, item in expr[kind].items()}
    if "value" in expr:
        return expr["value"]
    raise ValueError(f"not a value expression: keys {sorted(expr)}")


def join_branches(results: list[Expr], names: list[str | None]) -> Expr:
    """A Parallel's output from its branches' outputs, in branch order.

    ``names[i]`` is branch i's key: None for a branch with nodes, which is
    keyed by the node its output came from (a nested Parallel's map is
    merged in); a branch with no nodes passes its input through under its
    given name (``branch_<i>``), so two such branches never collide.
    """
    items: dict[str, Expr] = {}
    for result, name in zip(results, names, strict=True):
        if name is not None:
            items[name] = result
        elif "ref" in result:
            items[result["ref"]["node_id"]] = result
        elif "map" in result:
            items.update(result["map"])
        else:
            items[f"branch_{len(items)}"] = result
    return map_expr(items)
