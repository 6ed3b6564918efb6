"""``schedule()``: one test per rule of issue 2."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scheduler import (
    DistributionPlan,
    PlacementError,
    PlanValidationError,
    WorkerInfo,
    data_edges,
    schedule,
)
from tests.scheduler.helpers import ex, plan, worker


def _where(result: DistributionPlan) -> dict[str, str]:
    return {a.node_id: a.worker_id for a in result.assignments}


def _reasons(result: DistributionPlan) -> dict[str, str]:
    return {a.node_id: a.reason for a in result.assignments}


def _remote(node_id: str, target: dict[str, str], inner: Any) -> dict[str, Any]:
    return {"Remote": {"node_id": node_id, "target": target, "plan": inner}}


# --- Remote targets ----------------------------------------------------------------------


def test_remote_tag_lands_on_the_least_loaded_worker_with_the_tag() -> None:
    workers = [
        worker("cpu", tags=("cpu",), slots=16),
        worker("gpu-a", tags=("gpu",), slots=4, active=3),
        worker("gpu-b", tags=("gpu",), slots=4, active=1),
    ]
    wire = {"Sequence": [ex("load"), _remote("train", {"Tag": "gpu"}, ex("train")), ex("save")]}
    result = schedule(plan(wire), workers)
    assert _where(result) == {"load": "cpu", "train": "gpu-b", "save": "cpu"}
    assert "workers with tag 'gpu'" in _reasons(result)["train"]


def test_remote_tag_with_a_single_candidate_says_so() -> None:
    workers = [worker("cpu", tags=("cpu",), slots=16), worker("gpu", tags=("gpu",))]
    result = schedule(plan(_remote("t", {"Tag": "gpu"}, ex("train"))), workers)
    assert _where(result) == {"train": "gpu"}
    assert _reasons(result)["train"] == "only worker with tag 'gpu'"


def test_remote_worker_id_lands_on_that_worker() -> None:
    workers = [worker("w1", slots=1), worker("w2", slots=9)]
    result = schedule(plan(_remote("t", {"WorkerId": "w1"}, ex("train"))), workers)
    assert _where(result) == {"train": "w1"}
    assert _reasons(result)["train"] == "pinned to worker 'w1'"


def test_everything_inside_a_remote_honours_its_target_nested_parallels_too() -> None:
    workers = [
        worker("cpu", tags=("cpu",), slots=16),
        worker("gpu-a", tags=("gpu",)),
        worker("gpu-b", tags=("gpu",)),
    ]
    inner = {"Sequence": [ex("prep"), {"Parallel": [ex("a"), ex("b"), ex("c")]}, ex("merge")]}
    result = schedule(plan(_remote("train", {"Tag": "gpu"}, inner)), workers)
    assert set(_where(result).values()) <= {"gpu-a", "gpu-b"}
    assert {_where(result)["a"], _where(result)["b"]} == {"gpu-a", "gpu-b"}


def test_placement_error_counts_the_rejections() -> None:
    workers = [
        worker("cpu-1", tags=("cpu",)),
        worker("cpu-2", tags=("cpu",)),
        worker("gpu-1", tags=("gpu",), active=4, slots=4),
    ]
    wire = {"Sequence": [ex("load"), _remote("train", {"Tag": "gpu"}, ex("fit"))]}
    with pytest.raises(PlacementError) as caught:
        schedule(plan(wire), workers)
    error = caught.value
    assert str(error).startswith(
        "0/3 workers can take 'train' (target tag 'gpu'): 2 lack tag 'gpu', 1 at capacity."
    )
    assert error.node_id == "train" and error.total_workers == 3
    assert error.rejections == {"lack tag 'gpu'": 2, "at capacity": 1}


def test_placement_error_for_an_unknown_worker_id() -> None:
    workers = [worker("w1"), worker("w2", active=4, slots=4)]
    with pytest.raises(PlacementError, match=r"0/2 workers can take 't'.*2 have another id"):
        schedule(plan(_remote("t", {"WorkerId": "w9"}, ex("x"))), workers)


def test_allow_local_fallback_returns_an_empty_plan_with_the_message() -> None:
    workers = [worker("cpu", tags=("cpu",))]
    wire = {"Sequence": [ex("load"), _remote("train", {"Tag": "gpu"}, ex("fit"))]}
    result = schedule(plan(wire), workers, allow_local_fallback=True)
    assert result.assignments == [] and result.phases == [] and result.data_transfers == []
    assert len(result.warnings) == 1
    assert result.warnings[0].startswith("0/1 workers can take 'train'")
    assert "local execution" in result.warnings[0]


# --- no workers, capacity, slots -----------------------------------------------------------


def test_no_workers_gives_an_empty_plan_with_a_warning() -> None:
    result = schedule(plan(ex("a")), [])
    assert result.model_dump(mode="json") == {
        "assignments": [],
        "phases": [],
        "data_transfers": [],
        "warnings": ["No workers available — will execute locally"],
    }


def test_all_workers_at_capacity_gives_an_empty_plan_with_a_warning() -> None:
    workers = [worker("w1", active=2, slots=2), worker("w2", active=5, slots=1)]
    result = schedule(plan({"Sequence": [ex("a"), ex("b")]}), workers)
    assert result.assignments == []
    assert result.warnings == ["All workers are at capacity — will execute locally"]


def test_full_workers_are_never_chosen() -> None:
    workers = [worker("full", active=4, slots=4, cores=64), worker("free", slots=1)]
    result = schedule(plan({"Parallel": [ex("a"), ex("b")]}), workers)
    assert set(_where(result).values()) == {"free"}


def test_a_parallel_never_exceeds_free_slots_while_another_worker_has_some() -> None:
    workers = [worker("big", slots=3), worker("small", slots=1), worker("mid", slots=2)]
    result = schedule(plan({"Parallel": [ex(f"b{i}") for i in range(6)]}), workers)
    per_worker = [a.worker_id for a in result.assignments]
    assert {w: per_worker.count(w) for w in set(per_worker)} == {"big": 3, "mid": 2, "small": 1}
    assert result.warnings == []


def test_branches_spread_before_they_stack() -> None:
    workers = [worker("a", slots=8), worker("b", slots=2)]
    result = schedule(plan({"Parallel": [ex("x"), ex("y")]}), workers)
    assert sorted(_where(result).values()) == ["a", "b"]


def test_overflow_spreads_in_proportion_to_free_slots_and_warns() -> None:
    workers = [worker("a", slots=3), worker("b", slots=1)]
    result = schedule(plan({"Parallel": [ex(f"b{i}") for i in range(12)]}), workers)
    per_worker = [a.worker_id for a in result.assignments]
    assert per_worker.count("a") == 9 and per_worker.count("b") == 3
    (warning,) = result.warnings
    assert "12 parallel branches" in warning and "8 extra branches" in warning
    assert "in proportion to free slots" in warning


def test_ties_are_broken_by_worker_id_whatever_the_input_order() -> None:
    twins = [worker("w-b"), worker("w-a"), worker("w-c")]
    one = schedule(plan({"Parallel": [ex("x"), ex("y")]}), twins)
    other = schedule(plan({"Parallel": [ex("x"), ex("y")]}), list(reversed(twins)))
    assert _where(one) == {"x": "w-a", "y": "w-b"}
    assert one.model_dump(mode="json") == other.model_dump(mode="json")


def test_gpu_workers_are_kept_for_gpu_work() -> None:
    workers = [worker("gpu", gpu=True, cores=64), worker("cpu", cores=8)]
    result = schedule(plan(ex("a")), workers)
    assert _where(result) == {"a": "cpu"}


# --- structure: lanes --------------------------------------------------------------------


def test_controllers_keep_their_children_on_their_worker() -> None:
    workers = [worker("w1", slots=8), worker("w2", slots=2)]
    wire = {
        "Sequence": [
            {"Step": {"node_id": "router", "handoffs": [["billing", ex("bill")]]}},
            {"Branch": {"node_id": "route", "arms": [["l", ex("left")], ["r", ex("right")]]}},
            {"Loop": {"node_id": "tune", "body": {"Sequence": [ex("adjust"), ex("check")]}}},
            {"Composite": {"node_ids": ["enc", "dec"]}},
            {"Stream": {"node_ids": ["scale", "score"], "chunk_size": 8}},
        ]
    }
    result = schedule(plan(wire), workers)
    assert set(_where(result).values()) == {"w1"}
    assert result.data_transfers == []
    assert len(result.phases) == 1
    reasons = _reasons(result)
    assert reasons["bill"] == "handoff of step 'router', on its worker"
    assert reasons["left"] == "arm of branch 'route', on its controller's worker"
    assert reasons["adjust"] == "body of loop 'tune', on its controller's worker"
    assert reasons["tune"] == "loop controller"
    assert reasons["enc"].startswith("composite block")
    assert reasons["score"].startswith("stream block")


def test_parallels_nested_in_a_loop_are_placed_on_their_own() -> None:
    workers = [worker("w1"), worker("w2")]
    body = {"Sequence": [ex("prep"), {"Parallel": [ex("a"), ex("b")]}]}
    result = schedule(plan({"Loop": {"node_id": "L", "body": body}}), workers)
    assert _where(result)["a"] != _where(result)["b"]


# --- differentiable nodes ----------------------------------------------------------------


def test_differentiable_branch_stays_with_its_differentiable_input() -> None:
    workers = [worker("w1", slots=2), worker("w2", slots=8)]
    wire = {"Sequence": [ex("encoder"), {"Parallel": [ex("head_a"), ex("probe")]}]}
    result = schedule(plan(wire), workers, ["encoder", "head_a"])
    where = _where(result)
    assert where["head_a"] == where["encoder"]
    assert _reasons(result)["head_a"] == "differentiable with 'encoder'"
    assert not any(t.to_node == "head_a" for t in result.data_transfers)


def test_differentiable_across_a_parallel_boundary_inside_a_branch() -> None:
    workers = [worker("w1", slots=2), worker("w2", slots=2), worker("w3", slots=2)]
    wire = {
        "Sequence": [
            ex("embed"),
            {
                "Parallel": [
                    {"Sequence": [ex("encoder"), {"Parallel": [ex("decoder"), ex("x")]}]},
                    ex("other"),
                ]
            },
        ]
    }
    result = schedule(plan(wire), workers, ["encoder", "decoder"])
    where = _where(result)
    assert where["decoder"] == where["encoder"]


def test_differentiable_remote_that_cannot_stay_warns() -> None:
    workers = [worker("cpu", tags=("cpu",), slots=8), worker("gpu", tags=("gpu",))]
    wire = {"Sequence": [ex("enc"), _remote("r", {"Tag": "gpu"}, ex("dec"))]}
    result = schedule(plan(wire), workers, ["enc", "dec"])
    assert _where(result) == {"enc": "cpu", "dec": "gpu"}
    assert any("gradients will cross workers" in w for w in result.warnings)


# --- data transfers, phases, output --------------------------------------------------------


def test_transfers_follow_the_data_edges() -> None:
    workers = [worker("w1", slots=1), worker("w2", slots=1)]
    wire = {"Sequence": [ex("load"), {"Parallel": [ex("a"), ex("b")]}, ex("join")]}
    result = schedule(plan(wire), workers)
    where = _where(result)
    edges = {(t.from_node, t.to_node) for t in result.data_transfers}
    expected = {
        (s, t)
        for s, t in [("load", "a"), ("load", "b"), ("a", "join"), ("b", "join")]
        if where[s] != where[t]
    }
    assert edges == expected and len(result.data_transfers) == len(expected) == 2


def test_loop_back_edge_moves_carry_from_to_the_body_entries() -> None:
    workers = [worker("w1", slots=1), worker("w2", slots=1)]
    body = {"Sequence": [{"Parallel": [ex("a"), ex("b")]}, ex("judge")]}
    wire = {"Loop": {"node_id": "L", "body": body, "carry_from": "judge"}}
    result = schedule(plan(wire), workers)
    where = _where(result)
    moved = {(t.from_node, t.to_node) for t in result.data_transfers}
    assert ("judge", "b" if where["a"] == where["judge"] else "a") in moved


def test_phases_are_in_execution_order() -> None:
    workers = [worker("w1", slots=2), worker("w2", slots=2)]
    wire = {
        "Sequence": [
            ex("load"),
            {"Parallel": [ex("a"), {"Sequence": [ex("b1"), {"Parallel": [ex("c"), ex("d")]}]}]},
            ex("join"),
            _remote("r", {"WorkerId": "w2"}, ex("remote")),
            ex("end"),
        ]
    }
    result = schedule(plan(wire), workers)
    summary = [(p.phase_index, p.phase_type.kind, p.node_ids) for p in result.phases]
    w_load = _where(result)["load"]
    assert summary[:3] == [
        (0, "sequential", ["load"]),
        (1, "parallel", ["a", "b1", "c", "d"]),
        (2, "sequential", ["join"] + (["remote"] if w_load == "w2" else [])),
    ]
    assert [n for p in result.phases for n in p.node_ids] == [a.node_id for a in result.assignments]
    assert len(result.phases[1].worker_ids) == 2  # one per branch of the outer parallel


def test_every_reason_is_a_readable_sentence() -> None:
    with open("/work/shared/examples/pipeline.schedule-input.json", encoding="utf-8") as f:
        document = json.load(f)
    workers = [WorkerInfo.model_validate(w) for w in document["workers"]]
    result = schedule(plan(document["plan"]), workers)
    reasons = _reasons(result)
    assert reasons["train_svm"] == "only worker with tag 'gpu'"
    assert reasons["load"].startswith("least loaded worker")
    for reason in reasons.values():
        assert reason and "{" not in reason and "None" not in reason


def test_schedule_accepts_wire_json_and_variants() -> None:
    workers = [worker("w1")]
    from_text = schedule(json.dumps(ex("a")), workers)
    from_dict = schedule(ex("a"), workers)
    assert from_text == from_dict
    assert _where(from_text) == {"a": "w1"}


def test_loop_back_edge_reaches_entries_behind_a_pass_through_arm() -> None:
    arms = [["skip", "Empty"], ["go", ex("y")]]
    body = {"Sequence": [{"Branch": {"node_id": "c", "arms": arms}}, ex("x")]}
    wire = {"Loop": {"node_id": "L", "body": body, "carry_from": "c"}}
    # On later passes x reads c's output through the Empty arm, as on the first
    # pass it read the loop's input.
    assert set(data_edges(plan(wire))) == {("y", "x"), ("c", "y"), ("c", "x")}


def test_two_workers_with_one_id_are_rejected() -> None:
    with pytest.raises(PlanValidationError, match=r"\[1\]\.id: worker id 'w' is used twice"):
        schedule(plan(ex("a")), [worker("w"), worker("w", slots=9)])
