"""Wire round-trips against hand-written serde JSON, for every variant and model."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scheduler import (
    DistributionPlan,
    Execute,
    ExecutionPlan,
    Loop,
    LoopCondition,
    Remote,
    Sequence,
    Step,
    WorkerInfo,
    load_plan,
    load_workers,
)

EX = {"Execute": {"node_id": "normalize"}}

# (what we read, what serde writes back for it)
ROUND_TRIPS: list[tuple[Any, Any]] = [
    (EX, EX),
    ("Empty", "Empty"),
    ({"Sequence": []}, {"Sequence": []}),
    ({"Sequence": [EX, "Empty"]}, {"Sequence": [EX, "Empty"]}),
    ({"Parallel": [EX]}, {"Parallel": [EX]}),
    # Step: handoffs omitted when empty, whether absent or [] on input.
    ({"Step": {"node_id": "router"}}, {"Step": {"node_id": "router"}}),
    ({"Step": {"node_id": "router", "handoffs": []}}, {"Step": {"node_id": "router"}}),
    (
        {"Step": {"node_id": "router", "handoffs": [["billing", EX]]}},
        {"Step": {"node_id": "router", "handoffs": [["billing", EX]]}},
    ),
    # Loop: until defaults to BodyTerminal; max_iterations and carry_from to null.
    (
        {"Loop": {"node_id": "refine", "body": EX}},
        {
            "Loop": {
                "node_id": "refine",
                "body": EX,
                "max_iterations": None,
                "until": {"type": "BodyTerminal"},
                "carry_from": None,
            }
        },
    ),
    (
        {
            "Loop": {
                "node_id": "refine",
                "body": {
                    "Sequence": [
                        {"Execute": {"node_id": "draft"}},
                        {"Execute": {"node_id": "judge"}},
                    ]
                },
                "max_iterations": 3,
                "until": {"type": "WhenSignaled", "node": "judge"},
                "carry_from": "draft",
            }
        },
        None,
    ),
    (
        {
            "Loop": {
                "node_id": "l",
                "body": EX,
                "max_iterations": 2,
                "until": {"type": "Exhaust"},
                "carry_from": None,
            }
        },
        None,
    ),
    ({"Branch": {"node_id": "route", "arms": [["left", EX], ["right", "Empty"]]}}, None),
    ({"Branch": {"node_id": "route", "arms": []}}, None),
    ({"Remote": {"node_id": "train", "target": {"Tag": "gpu"}, "plan": EX}}, None),
    ({"Remote": {"node_id": "train", "target": {"WorkerId": "w1"}, "plan": EX}}, None),
    ({"Composite": {"node_ids": ["encoder", "decoder"]}}, None),
    ({"Stream": {"node_ids": ["scale", "score"], "chunk_size": 256}}, None),
]


@pytest.mark.parametrize(("wire", "written"), ROUND_TRIPS)
def test_plan_round_trip(wire: Any, written: Any) -> None:
    expected = wire if written is None else written
    plan = ExecutionPlan.model_validate(wire)
    assert plan.model_dump(mode="json") == expected
    assert json.loads(plan.model_dump_json()) == expected
    from_text = ExecutionPlan.model_validate_json(json.dumps(wire))
    assert from_text.model_dump(mode="json") == expected
    assert ExecutionPlan.model_validate(expected).model_dump(mode="json") == expected


def test_example_plan_round_trips() -> None:
    with open("/work/shared/examples/pipeline.plan.json", encoding="utf-8") as handle:
        text = handle.read()
    plan = load_plan(text)
    assert plan.model_dump(mode="json") == json.loads(text)
    again = ExecutionPlan.model_validate(plan.model_dump(mode="json"))
    assert again.model_dump(mode="json") == plan.model_dump(mode="json")
    assert plan.node_ids() == [
        "load",
        "normalize",
        "train_svm",
        "train_knn",
        "evaluate",
        "good_enough",
        "export",
        "tune",
        "adjust",
        "retrain",
        "check",
    ]


def test_node_ids_order_own_ids_first_then_children() -> None:
    wire = {
        "Step": {
            "node_id": "s",
            "handoffs": [
                [
                    "a",
                    {
                        "Branch": {
                            "node_id": "b",
                            "arms": [["x", {"Composite": {"node_ids": ["c1", "c2"]}}]],
                        }
                    },
                ],
                [
                    "z",
                    {
                        "Remote": {
                            "node_id": "r",
                            "target": {"Tag": "t"},
                            "plan": {
                                "Loop": {
                                    "node_id": "l",
                                    "body": {
                                        "Parallel": [
                                            {"Execute": {"node_id": "p1"}},
                                            {"Execute": {"node_id": "p2"}},
                                        ]
                                    },
                                }
                            },
                        }
                    },
                ],
            ],
        }
    }
    assert ExecutionPlan.model_validate(wire).node_ids() == ["s", "b", "c1", "c2", "l", "p1", "p2"]


def test_models_built_in_python_write_the_wire_form() -> None:
    body = Sequence(steps=[Execute(node_id="a"), Step(node_id="b")])
    loop = Loop(node_id="l", body=body, until=LoopCondition(type="WhenSignaled", node="a"))
    plan = ExecutionPlan.of(
        Remote.model_validate({"node_id": "r", "target": {"Tag": "gpu"}, "plan": loop})
    )
    assert plan.model_dump(mode="json") == {
        "Remote": {
            "node_id": "r",
            "target": {"Tag": "gpu"},
            "plan": {
                "Loop": {
                    "node_id": "l",
                    "body": {
                        "Sequence": [{"Execute": {"node_id": "a"}}, {"Step": {"node_id": "b"}}]
                    },
                    "max_iterations": None,
                    "until": {"type": "WhenSignaled", "node": "a"},
                    "carry_from": None,
                }
            },
        }
    }


def test_worker_info_round_trip() -> None:
    wire = {
        "id": "w1",
        "name": "GPU-A100",
        "tags": ["gpu"],
        "gpu": True,
        "cpu_cores": 16,
        "active_jobs": 0,
        "max_concurrent": 4,
    }
    worker = WorkerInfo.model_validate(wire)
    assert worker.model_dump(mode="json") == wire
    assert WorkerInfo.model_validate_json(json.dumps(wire)) == worker
    assert load_workers(json.dumps([wire])) == [worker]
    assert worker.available_slots == 4 and worker.has_capacity and worker.matches_tag("gpu")


def test_worker_reporting_more_jobs_than_slots_is_full_not_negative() -> None:
    worker = WorkerInfo(id="w", name="n", active_jobs=9, max_concurrent=4)
    assert worker.available_slots == 0 and not worker.has_capacity


DISTRIBUTION = {
    "assignments": [
        {
            "node_id": "load",
            "worker_id": "w1",
            "worker_name": "GPU-A100",
            "phase": "sequential",
            "reason": "least loaded worker",
        },
        {
            "node_id": "a",
            "worker_id": "w2",
            "worker_name": "CPU",
            "phase": "parallel",
            "reason": "most free slots",
        },
        {
            "node_id": "t",
            "worker_id": "w2",
            "worker_name": "CPU",
            "phase": {"trial": {"trial_index": 0, "total": 4}},
            "reason": "trial 0 of 4",
        },
    ],
    "phases": [
        {"phase_index": 0, "phase_type": "sequential", "node_ids": ["load"], "worker_ids": ["w1"]},
        {
            "phase_index": 1,
            "phase_type": {"trial": {"trial_index": 0, "total": 4}},
            "node_ids": ["t"],
            "worker_ids": ["w2"],
        },
    ],
    "data_transfers": [
        {
            "from_node": "normalize",
            "to_node": "train_knn",
            "from_worker": "w1",
            "to_worker": "w2",
            "transfer_type": "s3",
        },
        {
            "from_node": "x",
            "to_node": "y",
            "from_worker": "w1",
            "to_worker": "w2",
            "transfer_type": "direct",
        },
    ],
    "warnings": ["careful"],
}


def test_distribution_plan_round_trip() -> None:
    plan = DistributionPlan.load(json.dumps(DISTRIBUTION))
    assert plan.model_dump(mode="json") == DISTRIBUTION
    assert DistributionPlan.load(DISTRIBUTION) == plan
    assert plan.assignments[2].phase.describe() == "trial 0 of 4"
