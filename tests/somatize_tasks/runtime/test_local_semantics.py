"""What a run computes, for every plan variant, checked on the in-process runner.

The local runner shares the engine and the node-running code with
distributed runs, so these pin the semantics cheaply; ``test_e2e`` checks
the same plans on real workers.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest

from somatize_tasks.examples import nodes as example_nodes  # noqa: F401
from somatize_tasks.runtime.producer.local import run_local
from testkit.nodes import run_nodes  # noqa: F401  (registers the catalog)
from testkit.plans import (
    BRANCH,
    COMPOSITE,
    FORK_JOIN,
    FORK_JOIN_OPS,
    FORK_JOIN_OUTPUT,
    LOOP,
    MAKE_SUM,
    STEP,
    STREAM,
    ex,
    par,
    seq,
)


def output_of(plan: Any, **kwargs: Any) -> Any:
    result = run_local(plan, **kwargs)
    assert result.status == "done", result.error
    return result.output


def error_of(plan: Any, **kwargs: Any) -> dict[str, Any]:
    result = run_local(plan, **kwargs)
    assert result.status == "failed"
    assert result.error is not None
    return result.error


def test_sequence_threads_each_output_into_the_next_step() -> None:
    assert output_of(seq(ex("rt_add"), ex("rt_double")), input=4) == 10


def test_parallel_maps_each_branch_terminal_to_its_output() -> None:
    assert output_of(FORK_JOIN, ops=FORK_JOIN_OPS) == FORK_JOIN_OUTPUT


def test_parallel_branches_all_receive_the_same_input() -> None:
    assert output_of(par(ex("rt_add"), ex("rt_double")), input=3) == {"rt_add": 4, "rt_double": 6}


def test_params_reach_their_node_as_keywords() -> None:
    plan = seq(ex("rt_make"), ex("rt_sum"))
    assert output_of(plan, params={"rt_make": {"n": 3, "start": 1.0}}) == 1.0 + 1.5 + 2.0


def test_soma_numbering_runs_the_base_catalog_entry() -> None:
    assert output_of(seq(ex("rt_add"), ex("rt_add_2"), ex("rt_add_3")), input=0) == 3


def test_loop_carries_a_node_until_it_signals() -> None:
    # rt_add runs 0->1->...->5; rt_done says stop once the value reaches 5.
    assert output_of(LOOP, input=0) == 5


def test_exhaust_runs_every_pass_and_carries_only_from_carry_from() -> None:
    loop = {"node_id": "l", "body": ex("rt_add"), "max_iterations": 3, "until": {"type": "Exhaust"}}
    # As in Soma: without carry_from every pass starts from the loop's input again.
    assert output_of({"Loop": loop}, input=10) == 11
    assert output_of({"Loop": {**loop, "carry_from": "rt_add"}}, input=10) == 13


def test_loop_with_an_unreadable_signal_fails_naming_the_loop_and_the_node() -> None:
    body = seq(ex("rt_add"), ex("rt_bad_signal"))
    until = {"type": "WhenSignaled", "node": "rt_bad_signal"}
    plan = {"Loop": {"node_id": "l", "body": body, "max_iterations": 3, "until": until}}
    error = error_of(plan, input=0)
    assert error["node_id"] == "l"
    assert "'rt_bad_signal' produced 42" in error["message"]


def test_branch_evaluates_its_condition_and_runs_the_matching_arm_on_its_input() -> None:
    assert output_of(BRANCH, input=20) == 40
    assert output_of(BRANCH, input=3) == -3


def test_branch_with_an_unknown_label_names_the_labels() -> None:
    plan = {"Branch": {"node_id": "rt_label", "arms": [["large", ex("rt_double")]]}}
    error = error_of(plan, input=1)
    assert "selected 'small'" in error["message"] and "(large)" in error["message"]


def test_step_hands_off_to_a_declared_target() -> None:
    assert output_of(STEP, input=5) == 10
    assert output_of(STEP, input=-5) == 5


def test_step_cannot_hand_off_to_an_undeclared_target() -> None:
    plan = {"Step": {"node_id": "rt_route_nowhere", "handoffs": [["double", ex("rt_double")]]}}
    error = error_of(plan, input=1)
    assert "'nowhere'" in error["message"] and "(double)" in error["message"]


def test_stream_pushes_chunks_through_its_nodes_in_order() -> None:
    # chunks [1,2] [3,4] [5]: +2, +2, +1, then doubled.
    assert output_of(STREAM, input=[1, 2, 3, 4, 5]) == [6, 8, 10, 12, 12]


def test_a_stream_with_a_chunk_size_of_zero_pushes_the_input_as_one_chunk() -> None:
    # One chunk [1..5]: +5 each, then doubled (chunks of 2 give [6, 8, 10, 12, 12]).
    zero = {"Stream": {**STREAM["Stream"], "chunk_size": 0}}
    assert output_of(zero, input=[1, 2, 3, 4, 5]) == [12, 14, 16, 18, 20]


def test_a_loop_with_an_empty_body_outputs_its_input_and_the_run_goes_on() -> None:
    empty = {"Loop": {"node_id": "l", "body": "Empty", "max_iterations": 3}}
    assert output_of(seq(ex("rt_add"), empty, ex("rt_double")), input=1) == 4


def test_composite_runs_filters_in_memory_with_fit_and_forward() -> None:
    assert output_of(COMPOSITE, input=[1.0, 2.0, 3.0]) == [-2.0, 0.0, 2.0]


def test_empty_writes_nothing_and_a_plan_that_writes_nothing_outputs_null() -> None:
    assert output_of({"Sequence": ["Empty"]}, input={"a": 1}) is None
    assert output_of("Empty", input=1) is None
    assert output_of(seq("Empty", ex("rt_add"), "Empty"), input=1) == 2


def test_a_node_that_raises_fails_the_run_with_its_traceback() -> None:
    error = error_of(seq(ex("rt_add"), ex("rt_fail"), ex("rt_double")), input=1)
    assert error["node_id"] == "rt_fail"
    assert "rt_fail failed on purpose" in error["traceback"]


def test_a_node_missing_from_the_catalog_is_named() -> None:
    error = error_of(ex("no_such_node"))
    # What the catalog holds is listed (cut after a few dozen names: which names
    # depends on the catalog modules this session imported).
    assert "no_such_node" in error["message"] and "it holds: " in error["message"]


def test_the_example_pipeline_runs_to_an_export_or_a_tuned_model() -> None:
    plan = json.loads(
        resources.files("somatize_tasks.examples").joinpath("pipeline.plan.json").read_text()
    )
    assert isinstance(output_of(plan), dict)


@pytest.mark.parametrize("n", [1, 7])
def test_wide_parallel_joins_every_branch(n: int) -> None:
    plan = seq(par(*[ex(f"rt_add_{i + 2}") for i in range(n)]), ex("rt_join"))
    assert output_of(plan, input=1) == {
        "keys": sorted(f"rt_add_{i + 2}" for i in range(n)),
        "total": 2.0 * n,
    }


def test_local_run_makes_make_sum_right() -> None:
    assert output_of(seq(ex("rt_make"), ex("rt_sum"))) == MAKE_SUM


def test_an_output_no_codec_can_encode_names_its_type_and_node() -> None:
    error = error_of(seq(ex("rt_add"), ex("rt_unencodable")), input=1)
    assert error["node_id"] == "rt_unencodable"
    assert "object" in error["message"]


def test_parallel_keeps_every_empty_branch_under_its_own_name() -> None:
    plan = seq(ex("rt_add"), par("Empty", "Empty", ex("rt_double")))
    assert output_of(plan, input=1) == {"branch_0": 2, "branch_1": 2, "rt_double": 4}


def test_a_body_terminal_loop_runs_to_its_cap_as_somas_executor_does() -> None:
    # Soma's compiler resolves BodyTerminal to a named node; a plan that reaches the
    # executor with it runs every pass, whatever its body's last node signals.
    body = seq(
        ex("rt_add"),
        {
            "Branch": {
                "node_id": "rt_label",
                "arms": [["small", ex("rt_done_2")], ["big", ex("rt_done")]],
            }
        },
    )
    plan = {"Loop": {"node_id": "l", "body": body, "max_iterations": 50, "carry_from": "rt_add"}}
    result = run_local(plan, input=0)
    assert result.output == 50
    assert any("BodyTerminal" in w for w in result.warnings)


def test_an_outer_loop_reads_the_carry_and_signal_of_an_inner_loop() -> None:
    until = {"type": "WhenSignaled", "node": "rt_done"}
    body = seq(ex("rt_add"), ex("rt_done"))
    inner = {
        "Loop": {
            "node_id": "inner",
            "body": body,
            "max_iterations": 10,
            "until": until,
            "carry_from": "rt_add",
        }
    }
    outer = {
        "Loop": {
            "node_id": "outer",
            "body": inner,
            "max_iterations": 3,
            "until": until,
            "carry_from": "rt_add",
        }
    }
    # The inner loop counts 0 -> 5 and signals stop; the outer loop sees that stop at once.
    assert output_of(outer, input=0) == 5
