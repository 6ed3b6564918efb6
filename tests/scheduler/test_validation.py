"""Invalid input: one error type, naming the path to every bad field."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import (
    ExecutionPlan,
    PlanValidationError,
    SchedulerError,
    load_plan,
    load_workers,
)
from tests.scheduler.helpers import ex
from tests.scheduler.strategies import plans

# (invalid plan, path named, words in the message)
INVALID: list[tuple[Any, str, str]] = [
    ({"Sequence": [ex("a"), {"Bogus": {}}]}, "Sequence[1]", "not a plan variant"),
    ("Nothing", "", "'Nothing' is not a plan variant"),
    ({"Execute": {}}, "Execute.node_id", "field required"),
    ({"Execute": {"node_id": 3}}, "Execute.node_id", "valid string"),
    ({"Execute": {"node_id": ""}}, "Execute.node_id", "at least 1 character"),
    (
        {"Parallel": [ex("a"), {"Sequence": [ex("b"), ex("a")]}]},
        "Parallel[1].Sequence[1].Execute",
        "node id 'a' is used twice",
    ),
    (
        {"Branch": {"node_id": "r", "arms": [["x", ex("a")], ["x", ex("b")]]}},
        "Branch.arms[1]",
        "two arms labelled 'x'",
    ),
    (
        {"Stream": {"node_ids": ["a"], "chunk_size": -1}},
        "Stream.chunk_size",
        "greater than or equal to 0",
    ),
    (
        {"Loop": {"node_id": "l", "body": ex("a"), "max_iterations": -1}},
        "Loop.max_iterations",
        "greater than or equal to 0",
    ),
    (
        {"Loop": {"node_id": "l", "body": ex("a"), "until": {"type": "WhenSignaled"}}},
        "Loop.until",
        "needs the signalling 'node'",
    ),
    (
        {"Loop": {"node_id": "l", "body": ex("a"), "carry_from": "zz"}},
        "Loop.carry_from",
        "not a node of the plan",
    ),
    (
        {"Remote": {"node_id": "r", "target": {"Tag": "g", "WorkerId": "w"}, "plan": ex("a")}},
        "Remote.target",
        "exactly one of",
    ),
    ({"Composite": {"node_ids": []}}, "Composite.node_ids", "at least 1 item"),
    ({"Step": {"node_id": "s", "handoffs": [["h"]]}}, "Step.handoffs[0][1]", "field required"),
]


@pytest.mark.parametrize(("wire", "path", "words"), INVALID)
def test_invalid_plan_names_the_path(wire: Any, path: str, words: str) -> None:
    for load in (
        ExecutionPlan.model_validate,
        lambda w: ExecutionPlan.model_validate_json(json.dumps(w)),
    ):
        with pytest.raises(PlanValidationError) as caught:
            load(wire)
        problem = caught.value.problems[0]
        assert problem.path == path
        assert words in problem.message
        assert (f"{path}: " if path else "") + problem.message in str(caught.value)
        assert isinstance(caught.value, SchedulerError) and isinstance(caught.value, ValueError)


def test_duplicate_id_error_names_the_id_and_both_places() -> None:
    wire = {"Sequence": [ex("encoder"), {"Composite": {"node_ids": ["x", "encoder"]}}]}
    with pytest.raises(PlanValidationError) as caught:
        ExecutionPlan.model_validate(wire)
    message = str(caught.value)
    assert "'encoder'" in message
    assert "Sequence[1].Composite" in message and "first at Sequence[0].Execute" in message


def test_every_problem_is_reported_not_just_the_first() -> None:
    wire = {"Sequence": [{"Execute": {}}, {"Stream": {"node_ids": ["a"], "chunk_size": -1}}]}
    with pytest.raises(PlanValidationError) as caught:
        ExecutionPlan.model_validate(wire)
    assert [p.path for p in caught.value.problems] == [
        "Sequence[0].Execute.node_id",
        "Sequence[1].Stream.chunk_size",
    ]


@pytest.mark.parametrize(
    ("workers", "path"),
    [
        ([{"id": "w", "name": "n", "active_jobs": -1}], "[0].active_jobs"),
        ([{"id": "w", "name": "n"}, {"id": "w", "name": "m"}], "[1].id"),
        ([{"name": "n"}], "[0].id"),
        ({"id": "w"}, ""),
    ],
)
def test_invalid_workers_name_the_path(workers: Any, path: str) -> None:
    with pytest.raises(PlanValidationError) as caught:
        load_workers(workers)
    assert caught.value.problems[0].path == path


# --- fuzzing: junk and mutated documents -----------------------------------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=True),
    st.text(max_size=6),
    st.sampled_from(["Empty", "Execute", "Loop", "Tag", "node_id", ""]),
)
_keys = st.one_of(
    st.text(max_size=6),
    st.sampled_from(
        [
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
            "node_id",
            "node_ids",
            "body",
            "arms",
            "handoffs",
            "target",
            "plan",
            "chunk_size",
            "until",
            "carry_from",
            "max_iterations",
            "Tag",
            "WorkerId",
            "type",
            "node",
        ]
    ),
)
junk = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_keys, inner, max_size=3)),
    max_leaves=20,
)


def _mutate(doc: Any, data: st.DataObject) -> Any:
    """Replace, drop or retype one randomly chosen part of a valid document."""
    if isinstance(doc, dict) and doc and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(sorted(doc)))
        action = data.draw(st.sampled_from(["drop", "junk", "recurse", "rename"]))
        out = dict(doc)
        if action == "drop":
            del out[key]
        elif action == "junk":
            out[key] = data.draw(junk)
        elif action == "rename":
            out[data.draw(_keys)] = out.pop(key)
        else:
            out[key] = _mutate(out[key], data)
        return out
    if isinstance(doc, list) and doc and data.draw(st.booleans()):
        index = data.draw(st.integers(0, len(doc) - 1))
        out_list = list(doc)
        if data.draw(st.booleans()):
            out_list[index] = _mutate(out_list[index], data)
        else:
            out_list.insert(index, out_list[index])  # duplicates ids and labels
        return out_list
    return data.draw(junk)


def _only_plan_errors(document: Any) -> None:
    for attempt in (
        lambda: ExecutionPlan.model_validate(document),
        lambda: ExecutionPlan.model_validate_json(json.dumps(document)),
    ):
        try:
            plan = attempt()
        except PlanValidationError:
            continue
        # Whatever loads must write itself back unchanged.
        assert load_plan(plan.model_dump_json()).model_dump() == plan.model_dump()


FUZZ = settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))


@FUZZ
@given(document=junk)
def test_junk_documents_raise_only_plan_validation_errors(document: Any) -> None:
    _only_plan_errors(document)


@FUZZ
@given(wire=plans, data=st.data())
def test_mutated_plans_raise_only_plan_validation_errors(wire: Any, data: st.DataObject) -> None:
    _only_plan_errors(_mutate(wire, data))


@settings(max_examples=50, deadline=None)
@given(text=st.one_of(st.text(max_size=40), st.binary(max_size=40)))
def test_junk_text_raises_only_plan_validation_errors(text: str | bytes) -> None:
    with contextlib.suppress(PlanValidationError):
        ExecutionPlan.model_validate_json(text)
