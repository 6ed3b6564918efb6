"""Plans with a predecessors graph: loading, validation, and transfers along its edges."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler import (
    ExecutionPlan,
    PlanValidationError,
    WorkerInfo,
    data_edges,
    load_plan_document,
    schedule,
)


def ex(node_id: str) -> dict[str, Any]:
    return {"Execute": {"node_id": node_id}}


def remote(worker: str, node_id: str) -> dict[str, Any]:
    return {"Remote": {"node_id": node_id, "target": {"WorkerId": worker}, "plan": ex(node_id)}}


WORKERS = [WorkerInfo(id=w, name=w, max_concurrent=4) for w in ("w1", "w2")]


def transfers(plan: Any, preds: dict[str, list[str]]) -> list[tuple[str, str, str, str]]:
    document = load_plan_document(plan, preds)
    result = schedule(document.plan, WORKERS, predecessors=document.predecessors)
    return [(t.from_node, t.to_node, t.from_worker, t.to_worker) for t in result.data_transfers]


def test_a_diamond_has_exactly_one_transfer_per_cross_worker_edge() -> None:
    plan = {
        "Sequence": [
            remote("w1", "a"),
            {"Parallel": [remote("w1", "b"), remote("w2", "c")]},
            remote("w1", "d"),
        ]
    }
    preds = {"b": ["a"], "c": ["a"], "d": ["b", "c"]}
    assert sorted(transfers(plan, preds)) == [("a", "c", "w1", "w2"), ("c", "d", "w2", "w1")]


def test_a_skip_edge_is_one_transfer_from_its_real_producer() -> None:
    plan = {"Sequence": [remote("w1", "a"), remote("w2", "b"), remote("w2", "c")]}
    # c reads a (skipping b): the one crossing is a -> c, not b -> c.
    assert transfers(plan, {"b": ["a"], "c": ["a"]}) == [
        ("a", "b", "w1", "w2"),
        ("a", "c", "w1", "w2"),
    ]
    assert transfers(plan, {"c": ["a"]}) == [("a", "c", "w1", "w2")]


def test_data_edges_are_the_graphs_own_with_one() -> None:
    plan = ExecutionPlan.model_validate({"Sequence": [ex("a"), ex("b"), ex("c")]})
    assert data_edges(plan, {"c": ["a", "b"], "b": ["a"]}) == [("a", "c"), ("b", "c"), ("a", "b")]
    assert data_edges(plan) == [("a", "b"), ("b", "c")]


def test_a_document_loads_from_text_and_keeps_its_graph() -> None:
    text = '{"plan": {"Sequence": [{"Execute": {"node_id": "a"}}]}, "predecessors": {"a": []}}'
    document = load_plan_document(text)
    assert document.predecessors == {"a": []}
    assert document.to_wire() == {"plan": {"Sequence": [ex("a")]}, "predecessors": {"a": []}}
    assert load_plan_document(ex("a")).predecessors is None


LOOP_BODY = {
    "Loop": {"node_id": "l", "body": {"Sequence": [ex("a"), ex("b")]}, "max_iterations": 2}
}


@pytest.mark.parametrize(
    ("plan", "preds", "words"),
    [
        ({"Sequence": [ex("a")]}, {"zz": []}, "predecessors.zz: 'zz' is not a node of the plan"),
        ({"Sequence": [ex("a")]}, {"a": ["q"]}, "'q' (a predecessor of 'a') is not a node"),
        ({"Parallel": [ex("a"), ex("b")]}, {"b": ["a"]}, "runs in another parallel branch"),
        ({"Sequence": [ex("a"), ex("b")]}, {"a": ["b"]}, "a cycle outside a loop"),
        ({"Sequence": [ex("a")]}, {"a": ["a"]}, "cannot be its own predecessor outside a loop"),
        (
            {"Branch": {"node_id": "s", "arms": [["x", ex("a")], ["y", ex("b")]]}},
            {"b": ["a"]},
            "different arms of 'Branch' 's'",
        ),
        (LOOP_BODY, {"l": ["a"]}, "'a' runs after 'l'"),
        (ex("a"), {"a": "b"}, "predecessors.a: must be a list of node ids"),
    ],
)
def test_an_edge_that_cannot_carry_data_is_refused_naming_both_nodes(
    plan: Any, preds: Any, words: str
) -> None:
    with pytest.raises(PlanValidationError) as caught:
        load_plan_document(plan, preds)
    assert words in str(caught.value)


def test_back_edges_inside_a_loop_and_control_edges_are_allowed() -> None:
    branch = {"Branch": {"node_id": "s", "arms": [["x", ex("a")], ["y", ex("b")]]}}
    load_plan_document(branch, {"a": ["s"], "b": ["s"]})
    load_plan_document(LOOP_BODY, {"a": ["l", "b"], "b": ["a", "b"]})


def test_many_problems_are_listed_up_to_a_limit_with_a_count() -> None:
    plan = {"Sequence": [ex(f"n{i}") for i in range(50)]}
    preds = {f"n{i}": ["ghost"] for i in range(50)}
    with pytest.raises(PlanValidationError) as caught:
        load_plan_document(plan, preds)
    assert "… and 30 more" in str(caught.value) and len(caught.value.problems) == 50
