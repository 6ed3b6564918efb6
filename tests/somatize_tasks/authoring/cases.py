"""Every plan variant twice: built with the builder, and written by hand as JSON.

Each case holds the piece, the JSON document a user would write for the same
plan (with the parameters and ops that go with it), and the run's input. The
builder tests check that the two are one document and one run, in this
process and on real workers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from somatize_tasks.authoring import (
    branch,
    composite,
    empty,
    loop,
    op,
    remote,
    step,
    stream,
)
from somatize_tasks.authoring.pieces import Piece
from testkit.nodes import run_nodes, soma_nodes
from testkit.plans import ex, par, seq


@dataclass
class Case:
    name: str
    piece: Piece
    wire: Any
    input: Any = None
    params: dict[str, dict[str, Any]] = field(default_factory=dict)
    ops: dict[str, str] = field(default_factory=dict)
    kwargs: dict[str, Any] = field(default_factory=dict)


def graph(plan: Any, **preds: list[str]) -> dict[str, Any]:
    return {"plan": plan, "predecessors": preds}


def _fork_join() -> Case:
    piece = (
        op(run_nodes.make, n=8)
        >> op(run_nodes.scale, factor=3.0).to([run_nodes.total, run_nodes.size])
    ).collect(run_nodes.join)
    wire = graph(
        seq(ex("rt_make"), ex("rt_scale"), par(ex("rt_sum"), ex("rt_size")), ex("rt_join")),
        rt_make=[],
        rt_scale=["rt_make"],
        rt_sum=["rt_scale"],
        rt_size=["rt_scale"],
        rt_join=["rt_sum", "rt_size"],
    )
    return Case("fork_join", piece, wire, params={"rt_make": {"n": 8}, "rt_scale": {"factor": 3.0}})


def _numbered() -> Case:
    """A repeated node is numbered as Soma numbers it; ``id=`` needs an ops entry."""
    inc = op(soma_nodes.inc)
    piece = inc >> inc >> inc >> (op(run_nodes.double) | op(run_nodes.double, id="twice"))
    wire = graph(
        seq(ex("sm_inc"), ex("sm_inc_2"), ex("sm_inc_3"), par(ex("rt_double"), ex("twice"))),
        sm_inc=[],
        sm_inc_2=["sm_inc"],
        sm_inc_3=["sm_inc_2"],
        rt_double=["sm_inc_3"],
        twice=["sm_inc_3"],
    )
    return Case("numbered", piece, wire, input=1, ops={"twice": "rt_double"})


def _execute() -> Case:
    return Case(
        "execute", op("rt_add", k=2.5), graph(ex("rt_add"), rt_add=[]), 1, {"rt_add": {"k": 2.5}}
    )


def _loop() -> Case:
    piece = loop(
        "count_up",
        op(run_nodes.add) >> run_nodes.done,
        max_iterations=10,
        carry_from=run_nodes.add,
    )
    wire = {
        "Loop": {
            "node_id": "count_up",
            "body": seq(ex("rt_add"), ex("rt_done")),
            "max_iterations": 10,
            "until": {"type": "WhenSignaled", "node": "rt_done"},
            "carry_from": "rt_add",
        }
    }
    return Case("loop", piece, wire, input=0)


def _loop_exhaust() -> Case:
    piece = loop("thrice", op(run_nodes.add, k=2.0), until=False, max_iterations=3)
    wire = {
        "Loop": {
            "node_id": "thrice",
            "body": ex("rt_add"),
            "max_iterations": 3,
            "until": {"type": "Exhaust"},
            "carry_from": "rt_add",
        }
    }
    return Case("loop_exhaust", piece, wire, input=1, params={"rt_add": {"k": 2.0}})


def _branch() -> Case:
    piece = op(run_nodes.add) >> branch(
        run_nodes.label, {"big": run_nodes.double, "small": run_nodes.negate}
    )
    wire = seq(
        ex("rt_add"),
        {
            "Branch": {
                "node_id": "rt_label",
                "arms": [["big", ex("rt_double")], ["small", ex("rt_negate")]],
            }
        },
    )
    return Case("branch", piece, wire, input=20)


def _step() -> Case:
    piece = step(run_nodes.route, {"double": run_nodes.double, "negate": run_nodes.negate})
    wire = {
        "Step": {
            "node_id": "rt_route",
            "handoffs": [["double", ex("rt_double")], ["negate", ex("rt_negate")]],
        }
    }
    return Case("step", piece, wire, input=-4)


def _remote() -> Case:
    piece = op(run_nodes.make, n=6) >> remote(op(run_nodes.scale) >> run_nodes.total, tag="gpu")
    inner = seq(ex("rt_scale"), ex("rt_sum"))
    wire = graph(
        seq(
            ex("rt_make"),
            {"Remote": {"node_id": "rt_scale", "target": {"Tag": "gpu"}, "plan": inner}},
        ),
        rt_make=[],
        rt_scale=["rt_make"],
        rt_sum=["rt_scale"],
    )
    return Case("remote_tag", piece, wire, params={"rt_make": {"n": 6}})


def _remote_worker(worker_id: str) -> Case:
    piece = op(run_nodes.add) >> remote(run_nodes.where, worker=worker_id)
    wire = graph(
        seq(
            ex("rt_add"),
            {
                "Remote": {
                    "node_id": "rt_where",
                    "target": {"WorkerId": worker_id},
                    "plan": ex("rt_where"),
                }
            },
        ),
        rt_add=[],
        rt_where=["rt_add"],
    )
    return Case("remote_worker", piece, wire, input=1)


def _composite() -> Case:
    piece = op(run_nodes.make, n=5) >> composite(run_nodes.MeanCentre, run_nodes.scale)
    wire = graph(
        seq(ex("rt_make"), {"Composite": {"node_ids": ["rt_mean_centre", "rt_scale"]}}),
        rt_make=[],
        rt_mean_centre=["rt_make"],
        rt_scale=["rt_mean_centre"],
    )
    return Case("composite", piece, wire, params={"rt_make": {"n": 5}})


def _stream() -> Case:
    piece = stream(run_nodes.chunk_sum, run_nodes.scale, chunk_size=2)
    wire = graph(
        {"Stream": {"node_ids": ["rt_chunk_sum", "rt_scale"], "chunk_size": 2}},
        rt_chunk_sum=[],
        rt_scale=["rt_chunk_sum"],
    )
    return Case("stream", piece, wire, input=[1.0, 2.0, 3.0, 4.0, 5.0])


def _empty() -> Case:
    return Case("empty", empty(), "Empty", input=7)


def cases(worker_id: str = "w1") -> list[Case]:
    """Every variant; ``worker_id`` is the worker a ``WorkerId`` remote names."""
    return [
        _execute(),
        _fork_join(),
        _numbered(),
        _loop(),
        _loop_exhaust(),
        _branch(),
        _step(),
        _remote(),
        _remote_worker(worker_id),
        _composite(),
        _stream(),
        _empty(),
    ]
