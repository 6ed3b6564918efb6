"""Generated bad (and some good) input documents for the input fuzz test.

Deterministic (a seeded ``random.Random``), so a failure names a case that
comes back on the next run. Each case is ``(name, text, request)``: ``text``
is what a file handed to ``somatize-tasks plan`` holds (str or raw bytes),
``request`` the keyword arguments of the submit path's checks
(``check_request``). The categories are what an operator's junk looks like:
deep nesting, wrong types, huge counts, unknown variants, duplicate ids, bad
Unicode, bad params, truncated JSON and graphs naming nodes that do not exist.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from typing import Any

from scheduler import Execute, Sequence

WORKERS = [
    {
        "id": "w1",
        "name": "A",
        "tags": ["gpu"],
        "gpu": True,
        "cpu_cores": 8,
        "active_jobs": 0,
        "max_concurrent": 4,
    },
    {
        "id": "w2",
        "name": "B",
        "tags": ["cpu"],
        "gpu": False,
        "cpu_cores": 4,
        "active_jobs": 1,
        "max_concurrent": 2,
    },
]
VARIANTS = (
    "Sequence",
    "Parallel",
    "Execute",
    "Step",
    "Loop",
    "Branch",
    "Remote",
    "Composite",
    "Stream",
    "Empty",
)
#: Nodes of the test catalog the submit checks bind params against.
CATALOG_NODES = ("scale", "shift")
Case = tuple[str, "str | bytes", dict[str, Any]]


class Docs:
    """Random plans and their mutations."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.counter = 0

    def node_id(self) -> str:
        self.counter += 1
        return self.rng.choice(CATALOG_NODES) + f"_{self.counter}"

    def plan(self, depth: int = 0) -> Any:
        """A valid plan of a few nodes."""
        kinds = ["Execute"] * 3 + (
            [] if depth > 3 else ["Sequence", "Parallel", "Loop", "Branch", "Remote", "Step"]
        )
        kind = self.rng.choice([*kinds, "Composite", "Stream", "Empty"])
        kids = lambda: [self.plan(depth + 1) for _ in range(self.rng.randint(1, 3))]  # noqa: E731
        if kind == "Execute":
            return {"Execute": {"node_id": self.node_id()}}
        if kind in ("Sequence", "Parallel"):
            return {kind: kids()}
        if kind == "Loop":
            body = {"Execute": {"node_id": self.node_id()}}
            return {
                "Loop": {
                    "node_id": self.node_id(),
                    "body": body,
                    "max_iterations": 2,
                    "until": {"type": "Exhaust"},
                    "carry_from": None,
                }
            }
        if kind in ("Branch", "Step"):
            field = "arms" if kind == "Branch" else "handoffs"
            return {
                kind: {
                    "node_id": self.node_id(),
                    field: [[f"l{i}", p] for i, p in enumerate(kids())],
                }
            }
        if kind == "Remote":
            target = self.rng.choice([{"Tag": "gpu"}, {"WorkerId": "w2"}, {"Tag": "cpu"}])
            inner = self.plan(depth + 1)
            return {"Remote": {"node_id": self.node_id(), "target": target, "plan": inner}}
        if kind == "Composite":
            return {"Composite": {"node_ids": [self.node_id(), self.node_id()]}}
        if kind == "Stream":
            return {"Stream": {"node_ids": [self.node_id()], "chunk_size": 4}}
        return "Empty"

    def junk(self, depth: int = 0) -> Any:
        """Any JSON value, often shaped a bit like a plan."""
        roll = self.rng.random()
        if depth > 3 or roll < 0.4:
            return self.rng.choice(
                [
                    None,
                    True,
                    0,
                    -1,
                    2**70,
                    1.5,
                    "",
                    "Empty",
                    "x",
                    "\u00e9",
                    "Execute",
                    [],
                    {},
                    "\ud800",
                ]
            )
        if roll < 0.7:
            return [self.junk(depth + 1) for _ in range(self.rng.randint(0, 3))]
        keys = [*VARIANTS, "node_id", "body", "arms", "plan", "target", "Tag", "zz"]
        return {self.rng.choice(keys): self.junk(depth + 1) for _ in range(self.rng.randint(0, 2))}

    def mutate(self, doc: Any) -> Any:
        """Replace, drop, retype or duplicate one part of ``doc``."""
        if isinstance(doc, dict) and doc and self.rng.random() < 0.7:
            key = self.rng.choice(sorted(doc))
            out = dict(doc)
            action = self.rng.choice(["drop", "junk", "recurse", "recurse", "rename"])
            if action == "drop":
                del out[key]
            elif action == "junk":
                out[key] = self.junk()
            elif action == "rename":
                out[self.rng.choice([*VARIANTS, "Bogus", "node", ""])] = out.pop(key)
            else:
                out[key] = self.mutate(out[key])
            return out
        if isinstance(doc, list) and doc and self.rng.random() < 0.7:
            out_list = list(doc)
            index = self.rng.randrange(len(doc))
            if self.rng.random() < 0.5:
                out_list[index] = self.mutate(out_list[index])
            else:
                out_list.insert(index, out_list[index])  # duplicate ids and labels
            return out_list
        return self.junk()


def _ids(plan: Any) -> list[str]:
    found: list[str] = []
    stack = [plan]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found += [v for k, v in item.items() if k == "node_id" and isinstance(v, str)]
            found += [i for i in item.get("node_ids", []) if isinstance(i, str)]
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _schedule_input(plan: Any, **extra: Any) -> str:
    return json.dumps({"plan": plan, "workers": WORKERS, **extra})


def _deep(kind: str, levels: int) -> str:
    if kind == "sequence":
        return '{"Sequence": [' * levels + '"Empty"' + "]}" * levels
    if kind == "loop":
        return '{"Loop": {"node_id": "l", "body": ' * levels + '"Empty"' + "}}" * levels
    if kind == "array":
        return "[" * levels + "]" * levels
    return '{"a": ' * levels + "1" + "}" * levels


def cases(seed: int = 13, mutations: int = 1500) -> Iterator[Case]:
    """Every generated case (a few thousand)."""
    docs = Docs(seed)
    rng = docs.rng
    yield from _deep_cases(docs)
    yield from _huge_cases()
    yield from _unicode_cases()
    for i in range(mutations):
        plan = docs.mutate(docs.plan())
        yield f"mutated plan {i}", _schedule_input(plan), {"plan": plan}
    for i in range(300):
        plan = docs.junk()
        yield f"junk {i}", json.dumps(plan), {"plan": plan}
    for i in range(300):
        text = _schedule_input(docs.plan())
        cut = text[: rng.randrange(len(text))]
        yield f"truncated {i}", cut, {"plan": cut}
    for i in range(300):
        yield from _graph_case(docs, i)
    for i in range(400):
        yield from _params_case(docs, i)
    for i in range(100):
        document = {"plan": docs.plan(), "workers": docs.mutate(WORKERS)}
        yield f"bad workers {i}", json.dumps(document), {"plan": document["plan"]}


def _deep_cases(docs: Docs) -> Iterator[Case]:
    for kind in ("sequence", "loop", "array", "object"):
        for levels in (60, 127, 129, 1_000, 5_000, 50_000):
            text = _deep(kind, levels)
            yield f"deep {kind} {levels}", _schedule_input("@").replace('"@"', text), {"plan": text}
    deep_value: Any = 1
    for _ in range(3_000):
        deep_value = [deep_value]
    yield "deep parsed value", "[]", {"plan": deep_value}
    built: Any = Execute(node_id="a")
    for _ in range(5_000):
        built = Sequence(steps=[built])
    yield "deep plan objects", "[]", {"plan": built}
    yield "deep input", _schedule_input("Empty"), {"plan": "Empty", "input": deep_value}
    yield (
        "deep params",
        _schedule_input({"Execute": {"node_id": "scale_1"}}),
        {"plan": {"Execute": {"node_id": "scale_1"}}, "params": {"scale_1": {"k": deep_value}}},
    )
    brackets = json.dumps({"Execute": {"node_id": "[" * 500 + "{" * 500}})
    yield "brackets in a string", _schedule_input("@").replace('"@"', brackets), {"plan": brackets}
    deep_graph = '{"plan": "Empty", "predecessors": ' + _deep("object", 2_000) + "}"
    yield "deep predecessors", deep_graph, {"plan": deep_graph}


def _huge_cases() -> Iterator[Case]:
    dup = {"Parallel": [{"Execute": {"node_id": "a"}}] * 20_000}
    yield "20,000 duplicate ids", _schedule_input(dup), {"plan": dup}
    many = {"Sequence": [{"Execute": {"node_id": f"n{i}"}} for i in range(2_000)]}
    ghosts = {f"n{i}": [f"ghost{i}"] for i in range(2_000)}
    yield (
        "2,000 unknown predecessors",
        _schedule_input(many, predecessors=ghosts),
        {"plan": many, "predecessors": ghosts},
    )
    long_id = {"Sequence": [{"Execute": {"node_id": "x" * 1_000_000}}] * 2}
    yield "a 1 MB node id twice", _schedule_input(long_id), {"plan": long_id}
    labels = {"Branch": {"node_id": "b", "arms": [["same", "Empty"]] * 5_000}}
    yield "5,000 equal labels", _schedule_input(labels), {"plan": labels}
    unknown = {"Sequence": [{f"Bogus{i}": {}} for i in range(5_000)]}
    yield "5,000 unknown variants", _schedule_input(unknown), {"plan": unknown}
    params = {f"ghost{i}": {} for i in range(5_000)}
    yield (
        "5,000 unknown params",
        _schedule_input(many),
        {"plan": many, "params": params, "ops": {f"g{i}": "x" for i in range(5_000)}},
    )


def _unicode_cases() -> Iterator[Case]:
    good = json.dumps({"plan": {"Execute": {"node_id": "scale_1"}}, "workers": WORKERS})
    yield (
        "invalid UTF-8",
        good.encode()[:20] + b"\xff\xfe\x80" + good.encode()[20:],
        {"plan": good.encode()[:20] + b"\xff\xfe\x80"},
    )
    yield "UTF-16", good.encode("utf-16"), {"plan": good.encode("utf-16")}
    yield "a BOM", "\ufeff" + good, {"plan": "\ufeff" + good}
    surrogate = _schedule_input({"Execute": {"node_id": "@"}}).replace("@", "\\ud800")
    yield "a lone surrogate id", surrogate, {"plan": json.loads(surrogate)["plan"]}
    yield (
        "NUL in an id",
        _schedule_input({"Execute": {"node_id": "a\u0000b"}}),
        {"plan": {"Execute": {"node_id": "a\u0000b"}}},
    )
    yield (
        "a path as id",
        _schedule_input({"Execute": {"node_id": "../etc"}}),
        {"plan": {"Execute": {"node_id": "../etc"}}},
    )
    yield "empty file", "", {"plan": ""}
    yield "only spaces", "   \n", {"plan": "  "}


def _graph_case(docs: Docs, i: int) -> Iterator[Case]:
    plan = docs.plan()
    ids = _ids(plan) or ["none"]
    pick: Callable[[], str] = lambda: docs.rng.choice([*ids, "ghost", "", "input"])  # noqa: E731
    graph: Any = {pick(): [pick() for _ in range(docs.rng.randint(0, 3))] for _ in range(3)}
    if docs.rng.random() < 0.3:
        graph = docs.mutate(graph)
    yield (
        f"graph {i}",
        _schedule_input(plan, predecessors=graph),
        {"plan": plan, "predecessors": graph},
    )


def _params_case(docs: Docs, i: int) -> Iterator[Case]:
    plan = docs.plan()
    ids = _ids(plan) or ["ghost"]
    rng = docs.rng
    choices: list[Any] = [
        {rng.choice(ids): {"k": 2}},
        {rng.choice(ids): {"bogus": 1}},
        {rng.choice(ids): 5},
        [1, 2],
        "x",
        {rng.choice(ids): {"": 1}},
        {rng.choice(ids): {"k": object()}},
        {rng.choice(ids): {"k": float("nan")}},
        {"ghost": {}},
        docs.junk(),
    ]
    params = rng.choice(choices)
    ops = rng.choice([None, {rng.choice(ids): "scale"}, {rng.choice(ids): 3}, [], {"ghost": "x"}])
    yield f"params {i}", _schedule_input(plan), {"plan": plan, "params": params, "ops": ops}
