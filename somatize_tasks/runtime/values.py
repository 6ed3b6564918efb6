"""Value expressions: how a node's input is described without carrying it.

A message never holds a large value, only an expression that says where
the value is:

``{"ref": {...ArtifactRef...}}``
    one node output in the artifact store (small ones carry the bytes
    inline, so they need no transfer);
``{"map": {"train_svm": <expr>, "train_knn": <expr>}}``
    a Parallel's output: each branch's terminal node id to its output;
``{"value": <json>}``
    a literal, such as a small run input given by the producer.

The worker that runs a node turns the expression into a Python value
(:func:`materialize`), fetching each ref from its cache or the shared store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

Expr = dict[str, Any]


def ref_expr(ref: Mapping[str, Any]) -> Expr:
    return {"ref": dict(ref)}


def value_expr(value: Any) -> Expr:
    return {"value": value}


def map_expr(items: Mapping[str, Expr]) -> Expr:
    return {"map": dict(items)}


def refs_in(expr: Expr) -> Iterator[dict[str, Any]]:
    """Every artifact ref the expression mentions (depth first)."""
    if "ref" in expr:
        yield expr["ref"]
    elif "map" in expr:
        for item in expr["map"].values():
            yield from refs_in(item)


def materialize(expr: Expr, fetch: Callable[[dict[str, Any]], Any]) -> Any:
    """The Python value an expression stands for; ``fetch`` reads one ref."""
    if "ref" in expr:
        return fetch(expr["ref"])
    if "map" in expr:
        return {key: materialize(item, fetch) for key, item in expr["map"].items()}
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
