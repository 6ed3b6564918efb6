"""``schedule_study()``: trials round-robin, each on one worker, phased and explained."""

from __future__ import annotations

import pytest

from scheduler import schedule_study
from tests.scheduler.helpers import ex, plan, worker

TRIAL_PLAN = plan({"Sequence": [ex("fit"), {"Parallel": [ex("a"), ex("b")]}, ex("score")]})


def test_trials_go_round_robin_in_worker_id_order() -> None:
    workers = [worker("w3"), worker("w1"), worker("full", active=4, slots=4), worker("w2")]
    result = schedule_study(TRIAL_PLAN, workers, trials=5)
    per_trial = [
        {a.worker_id for a in result.assignments if a.phase.trial_index == i} for i in range(5)
    ]
    assert per_trial == [{"w1"}, {"w2"}, {"w3"}, {"w1"}, {"w2"}]
    assert len(result.assignments) == 5 * 4


def test_trial_assignments_carry_the_trial_phase_and_reason() -> None:
    result = schedule_study(TRIAL_PLAN, [worker("w1"), worker("w2")], trials=8)
    row = next(a for a in result.assignments if a.phase.trial_index == 2)
    assert row.model_dump(mode="json")["phase"] == {"trial": {"trial_index": 2, "total": 8}}
    assert row.reason.startswith("trial 2 of 8, round-robin")
    assert [p.phase_index for p in result.phases] == list(range(8))
    assert [p.phase_type.trial_index for p in result.phases] == list(range(8))
    assert result.phases[3].node_ids == ["fit", "a", "b", "score"]
    assert result.data_transfers == []  # a trial stays on its worker


def test_a_remote_inside_a_trial_still_goes_where_its_target_says() -> None:
    wire = {
        "Sequence": [
            ex("prep"),
            {"Remote": {"node_id": "r", "target": {"Tag": "gpu"}, "plan": ex("train")}},
        ]
    }
    workers = [worker("c1"), worker("c2"), worker("g", tags=("gpu",))]
    result = schedule_study(plan(wire), workers, trials=3)
    assert {a.worker_id for a in result.assignments if a.node_id == "train"} == {"g"}
    assert {(t.from_node, t.to_node) for t in result.data_transfers} == {("prep", "train")}
    assert len(result.data_transfers) == 2  # trials 0 and 1 run prep on c1, c2
    assert result.phases[0].worker_ids == ["c1", "g"]


def test_study_without_workers_warns_and_bad_trial_count_raises() -> None:
    assert schedule_study(TRIAL_PLAN, [], trials=2).warnings
    assert schedule_study(TRIAL_PLAN, [worker("w")], trials=0).assignments == []
    with pytest.raises(ValueError, match="trials must be >= 0"):
        schedule_study(TRIAL_PLAN, [worker("w")], trials=-1)


def test_a_trial_phase_names_every_worker_it_uses() -> None:
    remote_branch = {"Remote": {"node_id": "r", "target": {"Tag": "gpu"}, "plan": ex("g")}}
    wire = {"Sequence": [ex("prep"), {"Parallel": [ex("a"), remote_branch]}]}
    workers = [worker("c1"), worker("g1", tags=("gpu",))]
    result = schedule_study(plan(wire), workers, trials=1)
    assert {a.node_id: a.worker_id for a in result.assignments} == {
        "prep": "c1",
        "a": "c1",
        "g": "g1",
    }
    assert result.phases[0].worker_ids == ["c1", "g1"]
