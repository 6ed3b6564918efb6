"""The plan builder: Soma's ids and operators, serde's JSON, and the same runs as JSON."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest

from scheduler import load_plan_document
from somatize_tasks.authoring import branch, build, loop, op, remote, stream
from somatize_tasks.errors import PlanBuildError
from somatize_tasks.examples import nodes as ex
from somatize_tasks.runtime.producer.local import run_local
from testkit.nodes import run_nodes, soma_nodes
from tests.somatize_tasks.authoring.cases import Case, cases

CASES = cases()


def comparable(result: Any) -> tuple[Any, ...]:
    """What two runs of one plan must agree on (times aside)."""
    nodes = {n: (v.get("state"), v.get("worker")) for n, v in result.nodes.items()}
    return result.status, result.output, result.error, nodes, result.warnings


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_built_plan_is_the_document_written_as_json(case: Case) -> None:
    built = build(case.piece)
    assert built.to_wire() == case.wire
    assert json.loads(built.to_json()) == case.wire
    assert built.document == load_plan_document(case.wire)
    assert built.params == case.params
    assert built.ops == case.ops


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_built_plan_runs_as_the_json_plan_runs(case: Case) -> None:
    from_json = run_local(case.wire, input=case.input, params=case.params, ops=case.ops)
    from_piece = run_local(case.piece, input=case.input)
    from_built = run_local(build(case.piece), input=case.input)
    assert from_json.status == "done", from_json.error
    assert comparable(from_piece) == comparable(from_built) == comparable(from_json)


def test_the_runs_compute_what_the_nodes_compute() -> None:
    """Not only equal to each other: right (a broken runner could agree with itself)."""
    outputs = {c.name: run_local(c.piece, input=c.input).output for c in CASES}
    scaled = [i * 0.5 * 3.0 for i in range(8)]
    assert outputs["fork_join"] == {"keys": ["rt_size", "rt_sum"], "total": sum(scaled) + 8}
    assert outputs["numbered"] == 8.0  # the last node run (Soma's output with a graph)
    assert outputs["execute"] == 3.5
    assert outputs["loop"] == 5  # add 1 until done (>= 5)
    assert outputs["loop_exhaust"] == 7.0  # three passes of +2
    assert outputs["branch"] == 42  # 21 is big: doubled
    assert outputs["step"] == 4  # negative: handed to negate
    assert outputs["remote_tag"] == sum(i * 0.5 * 2.0 for i in range(6))
    assert outputs["composite"] == [(i * 0.5 - 1.0) * 2.0 for i in range(5)]
    assert outputs["stream"] == [6.0, 8.0, 10.0, 12.0, 12.0]
    assert outputs["empty"] is None


def test_given_params_and_ops_win_node_by_node() -> None:
    plan = op(run_nodes.add, k=1.0) >> op(run_nodes.double)
    result = run_local(
        plan, input=1, params={"rt_add": {"k": 10.0}}, ops={"rt_double": "rt_negate"}
    )
    assert result.output == -11.0


def test_soma_numbering_counts_explicit_ids_too() -> None:
    built = build(op("a") >> op("a") >> op("b", id="a_2") >> op("a"))
    assert built.node_ids() == ["a", "a_2", "a_2_2", "a_3"]


def test_an_unregistered_function_is_a_clear_error() -> None:
    def stray(x: Any) -> Any:
        return x

    with pytest.raises(PlanBuildError, match=r"stray is not a registered node: decorate it"):
        build(op(stray))


def test_a_loop_over_a_fork_must_name_its_signal() -> None:
    body = op("rt_add").to(["rt_done", "rt_double"])
    with pytest.raises(PlanBuildError, match=r"loop 'again'.*body has 2 \(rt_done, rt_double\)"):
        build(loop("again", body, max_iterations=2))


def test_a_reference_to_a_node_used_twice_is_refused() -> None:
    body = op(run_nodes.add) >> run_nodes.add
    with pytest.raises(PlanBuildError, match=r"is used 2 times \(rt_add, rt_add_2\)"):
        build(loop("again", body, carry_from=run_nodes.add))


def test_bad_arguments_name_what_is_wrong() -> None:
    with pytest.raises(PlanBuildError, match="exactly one of tag= or worker="):
        remote(op("a"))
    with pytest.raises(PlanBuildError, match="chunk_size must be a positive int"):
        stream("a", chunk_size=0)
    with pytest.raises(PlanBuildError, match="is not a node"):
        op(3)
    with pytest.raises(PlanBuildError, match="graph=True"):
        build(loop("l", op("a"), max_iterations=1), graph=True)


def test_graph_false_writes_the_bare_plan_soma_compiles() -> None:
    built = build(op(soma_nodes.inc) >> soma_nodes.times10, graph=False)
    assert built.to_wire() == {
        "Sequence": [{"Execute": {"node_id": "sm_inc"}}, {"Execute": {"node_id": "sm_times10"}}]
    }
    assert run_local(built, input=1).output == 20.0


def test_the_bundled_example_pipeline_built_in_python_is_its_json_file() -> None:
    plan = (op(ex.load) >> ex.normalize).to(
        [remote(ex.train_svm, tag="gpu"), ex.train_knn]
    ).collect(ex.evaluate) >> branch(
        ex.good_enough,
        {
            "yes": ex.export,
            "no": loop(
                "tune",
                op(ex.adjust) >> ex.retrain >> ex.check,
                max_iterations=5,
                carry_from=ex.retrain,
            ),
        },
    )
    text = resources.files("somatize_tasks.examples").joinpath("pipeline.plan.json").read_text()
    assert build(plan).to_wire() == json.loads(text)
