"""A run computes what Soma's executor computes: each rule of DESIGN.md's
"Runtime semantics", checked in process (``test_fidelity_e2e`` runs a subset
on real workers; both go through the same engine).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from scheduler import PlanValidationError
from somatize_tasks.catalog.entries import Catalog
from somatize_tasks.errors import CatalogError, RunModeError
from somatize_tasks.runtime.producer.local import LocalRunResult, run_local
from testkit.nodes import run_nodes, soma_nodes  # noqa: F401  (register the catalog)
from testkit.plans import ex, par, seq


def done(plan: Any, **kwargs: Any) -> LocalRunResult:
    result = run_local(plan, **kwargs)
    assert result.status == "done", result.error
    return result


def failed(plan: Any, **kwargs: Any) -> dict[str, Any]:
    result = run_local(plan, **kwargs)
    assert result.status == "failed", result.output
    assert result.error is not None
    return result.error


def loop(body: Any, **fields: Any) -> dict[str, Any]:
    return {"Loop": {"node_id": "l", "body": body, **fields}}


def branch(node_id: str, *arms: tuple[str, Any]) -> dict[str, Any]:
    return {"Branch": {"node_id": node_id, "arms": [list(a) for a in arms]}}


# --- loops ---------------------------------------------------------------------------------


def test_exhaust_with_a_null_cap_loads_and_runs_somas_100_passes_with_a_warning() -> None:
    plan = loop(ex("sm_inc"), max_iterations=None, until={"type": "Exhaust"}, carry_from="sm_inc")
    result = done(plan, input=0)
    assert result.output == 100
    assert any("no max_iterations" in w and "100 passes" in w for w in result.warnings)


def test_a_signal_that_never_says_stop_ends_at_the_cap_of_100_passes() -> None:
    body = seq(ex("sm_inc"), ex("sm_never_stop"))
    plan = loop(body, until={"type": "WhenSignaled", "node": "sm_never_stop"}, carry_from="sm_inc")
    result = done(plan, input=0)
    assert result.output == 100
    assert result.nodes["sm_inc"]["epoch"] == 100


def test_when_signaled_reads_the_nodes_latest_value_even_from_before_the_loop() -> None:
    # sm_signal_first ran once, before the loop, and said stop (3 >= 3): one pass only.
    plan = seq(
        ex("sm_signal_first"),
        loop(
            ex("sm_inc"),
            max_iterations=5,
            carry_from="sm_inc",
            until={"type": "WhenSignaled", "node": "sm_signal_first"},
        ),
    )
    preds = {"sm_inc": ["l"]}  # the loop reads the run's input, its body the carry
    assert done(plan, input=3, predecessors=preds).output == 4
    # Its latest value says continue (1 < 3) and it never runs again: all five passes.
    assert done(plan, input=1, predecessors=preds).output == 6


def test_when_signaled_fails_only_when_its_node_never_produced_a_value() -> None:
    body = seq(
        ex("sm_inc"),
        branch("rt_label", ("big", ex("sm_signal_first")), ("small", ex("sm_times10"))),
    )
    plan = loop(body, max_iterations=3, until={"type": "WhenSignaled", "node": "sm_signal_first"})
    error = failed(plan, input=0)
    assert error["node_id"] == "l"
    assert "'sm_signal_first' produced no output by the end of pass 1" in error["message"]


def test_without_carry_from_every_pass_restarts_from_the_loops_input() -> None:
    plan = loop(seq(ex("sm_inc"), ex("sm_times10")), max_iterations=4, until={"type": "Exhaust"})
    assert done(plan, input=1).output == 20  # (1 + 1) * 10, four times over


def test_a_loop_with_zero_passes_outputs_its_input() -> None:
    assert done(loop(ex("sm_inc"), max_iterations=0), input=7).output == 7


@pytest.mark.parametrize("until", [{"type": "Exhaust"}, {"type": "BodyTerminal"}])
def test_a_loop_with_an_empty_body_passes_its_input_through(until: dict[str, Any]) -> None:
    # Soma's loop seeds its node with its input and runs nothing, 100 times (a null cap).
    plan = seq(ex("sm_inc"), loop("Empty", max_iterations=None, until=until))
    assert done(plan, input=7).output == 8
    assert done(plan, input=7, predecessors={"sm_inc": [], "l": ["sm_inc"]}).output == 8


def test_an_empty_body_loop_reads_its_carry_and_its_condition_as_soma() -> None:
    carried = seq(ex("sm_inc"), ex("sm_times10"), loop("Empty", carry_from="sm_inc"))
    preds = {"sm_inc": [], "sm_times10": ["sm_inc"], "l": ["sm_times10"]}
    assert done(carried, input=1, predecessors=preds).output == 2  # the carry, not 20
    never = seq(
        ex("sm_inc"),
        loop("Empty", until={"type": "WhenSignaled", "node": "sm_signal_first"}),
        ex("sm_signal_first"),
    )
    error = failed(never, input=1)
    assert "'sm_signal_first' produced no output" in error["message"]


# --- branches and steps ----------------------------------------------------------------


def test_a_bool_selector_picks_the_true_or_false_arm() -> None:
    plan = branch("sm_bool", ("true", ex("sm_times10")), ("false", ex("sm_inc")))
    assert done(plan, input=2).output == 20
    assert done(plan, input=-2).output == -1


def test_a_branch_object_selects_its_label() -> None:
    plan = branch("sm_select", ("pos", ex("sm_times10")), ("neg", ex("sm_inc")))
    assert done(plan, input=-5).output == -4


@pytest.mark.parametrize("catch_all", ["default", "else"])
def test_no_matching_label_takes_the_default_or_else_arm(catch_all: str) -> None:
    plan = branch("sm_unknown_label", ("pos", ex("sm_times10")), (catch_all, ex("sm_inc")))
    assert done(plan, input=1).output == 2


def test_a_condition_that_hands_off_names_its_arm() -> None:
    plan = branch("sm_hand_to", ("ones", ex("sm_inc")), ("tens", ex("sm_times10")))
    assert done(plan, input=3).output == 30


def test_the_branch_nodes_own_value_is_its_input_not_the_selector() -> None:
    plan = seq(ex("sm_inc"), branch("sm_bool", ("true", "Empty"), ("false", "Empty")))
    assert done(plan, input=1).output == 2  # the last value written: the branch's input


# --- graph data edges ------------------------------------------------------------------


def test_a_diamond_reads_an_object_keyed_by_predecessor() -> None:
    plan = seq(ex("sm_inc"), par(ex("sm_times10"), ex("rt_double")), ex("sm_pair"))
    preds = {
        "sm_times10": ["sm_inc"],
        "rt_double": ["sm_inc"],
        "sm_pair": ["sm_times10", "rt_double"],
    }
    assert done(plan, input=1, predecessors=preds).output == {
        "keys": ["rt_double", "sm_times10"],
        "sum": 24.0,
    }


def test_a_skip_edge_reads_the_earlier_node_not_the_previous_step() -> None:
    plan = seq(ex("sm_inc"), ex("sm_times10"), ex("rt_double"))
    preds = {"sm_times10": ["sm_inc"], "rt_double": ["sm_inc"]}
    assert done(plan, input=1, predecessors=preds).output == 4  # (1 + 1) * 2, not 20 * 2
    assert done(plan, input=1).output == 40  # by the plan's shape


def test_the_document_form_and_roots_that_read_the_run_input() -> None:
    document = {"plan": seq(ex("sm_inc"), ex("sm_times10")), "predecessors": {}}
    assert done(document, input=5).output == 50  # no predecessors: the run's input


def test_a_predecessor_that_did_not_run_reads_as_none() -> None:
    plan = seq(
        branch("sm_bool", ("true", ex("sm_inc")), ("false", ex("sm_times10"))), ex("sm_describe")
    )
    preds = {"sm_inc": ["sm_bool"], "sm_times10": ["sm_bool"], "sm_describe": ["sm_times10"]}
    assert done(plan, input=1, predecessors=preds).output == "NoneType:None"


def test_the_output_is_the_last_node_executed_in_plan_order() -> None:
    plan = seq(ex("sm_inc"), par(ex("sm_times10"), ex("rt_double")))
    preds = {"sm_times10": ["sm_inc"], "rt_double": ["sm_inc"]}
    assert done(plan, input=1, predecessors=preds).output == 4  # the last branch's write


def test_a_loop_body_reads_the_carry_through_the_loop_node() -> None:
    plan = loop(ex("sm_inc"), max_iterations=3, until={"type": "Exhaust"}, carry_from="sm_inc")
    assert done(plan, input=0, predecessors={"sm_inc": ["l"]}).output == 3


def test_an_empty_plan_outputs_null_in_both_data_models() -> None:
    assert done("Empty", input=1).output is None
    assert done({"plan": "Empty", "predecessors": {}}, input=1).output is None


def test_a_predecessors_map_naming_an_unknown_node_is_refused_by_name() -> None:
    with pytest.raises(PlanValidationError, match=r"predecessors\.sm_inc\[0\]: 'ghost'"):
        run_local(ex("sm_inc"), predecessors={"sm_inc": ["ghost"]})


# --- fit and forward -------------------------------------------------------------------

PIPELINE = seq(ex("sm_standardise"), ex("sm_centroids"))
X_TRAIN = [[0.0, 0.0], [1.0, 1.0], [10.0, 10.0], [11.0, 9.0]]
Y_TRAIN = ["low", "low", "high", "high"]
X_NEW = [[0.5, 0.2], [9.0, 12.0]]


def test_fit_keeps_states_and_forward_predicts_as_fitting_by_hand() -> None:
    fit = done(PIPELINE, input=X_TRAIN, mode="fit", y=Y_TRAIN)
    assert set(fit.states) == {"sm_standardise", "sm_centroids"}
    predicted = done(PIPELINE, input=X_NEW, states=fit.states)  # forward by default
    scaler, classifier = soma_nodes.Standardise(), soma_nodes.NearestCentroid()
    scale_state = scaler.fit(X_TRAIN)
    class_state = classifier.fit(scaler.forward(X_TRAIN, scale_state), Y_TRAIN)
    by_hand = classifier.forward(scaler.forward(X_NEW, scale_state), class_state)
    assert predicted.output == by_hand == ["low", "high"]


def test_forward_never_fits_and_uses_the_given_state() -> None:
    result = done(ex("sm_offset"), input=[1.0, 2.0], mode="forward", states={"sm_offset": 10.0})
    assert result.output == [11.0, 12.0] and result.states == {}


def test_a_forward_run_with_no_state_for_a_trainable_filter_names_it() -> None:
    error = failed(ex("sm_offset"), input=[1.0], mode="forward")
    assert error["node_id"] == "sm_offset" and error["type"] == "MissingStateError"
    assert "no state" in error["message"] and "--states-from" in error["message"]


def test_a_stateless_filter_is_never_fitted() -> None:
    assert done(ex("sm_stateless"), input=3, mode="fit").output == {"state": None, "x": 3}


def test_labels_in_a_forward_run_and_states_in_a_fit_are_refused() -> None:
    with pytest.raises(RunModeError, match="labels"):
        run_local(PIPELINE, mode="forward", y=[1])
    with pytest.raises(RunModeError, match="states_from is for forward runs"):
        run_local(PIPELINE, mode="fit", states={"sm_offset": 1.0})
    with pytest.raises(RunModeError, match="mode must be"):
        run_local(PIPELINE, mode="predict")


def test_a_composite_in_a_fit_is_fitted_as_one_block_when_its_filter_offers() -> None:
    catalog = Catalog()

    class Joint:
        def fit(self, x: Any, y: Any = None) -> None:
            raise AssertionError("fitted one by one")

        def forward(self, x: Any, state: Any) -> Any:
            return x

        @staticmethod
        def composite_fit(peers: list[tuple[str, Any]], x: Any, y: Any) -> Any:
            return {"fitted": [n for n, _ in peers], "y": y}, {n: len(n) for n, _ in peers}

    catalog.register("j1", Joint)
    catalog.register("j2", Joint)
    result = done({"Composite": {"node_ids": ["j1", "j2"]}}, catalog=catalog, y="labels")
    assert result.output == {"fitted": ["j1", "j2"], "y": "labels"}
    assert result.states == {"j1": 2, "j2": 2}


# --- streams ---------------------------------------------------------------------------


def stream(*node_ids: str, chunk_size: int = 2) -> dict[str, Any]:
    return {"Stream": {"node_ids": list(node_ids), "chunk_size": chunk_size}}


def test_a_stream_cannot_fit_and_runs_forward_by_default() -> None:
    with pytest.raises(RunModeError, match="cannot run in a fit"):
        run_local(stream("sm_count_chunk"), input=[1, 2, 3], mode="fit")
    assert done(stream("sm_count_chunk"), input=[1, 2, 3]).output == [2, 1]


def test_fixed_state_uses_its_state_for_every_chunk() -> None:
    result = done(stream("sm_fixed"), input=[1.0, 2.0, 3.0], states={"sm_fixed": 5.0})
    assert result.output == [6.0, 7.0, 8.0]


def test_evolving_passes_each_chunks_output_on_as_the_next_state() -> None:
    assert done(stream("sm_evolving"), input=[1, 2, 3, 4, 5]).output == [1, 3, 6, 10, 15]


@pytest.mark.parametrize(
    ("node", "expected"), [("sm_fixed", [1.0, 2.0, 3.0]), ("sm_evolving_trained", [1, 3, 6])]
)
def test_a_stream_node_never_fitted_starts_from_an_empty_state(
    node: str, expected: list[float]
) -> None:
    # Soma's base_state is Value::Empty when the catalog holds no state, in every mode.
    assert done(stream(node), input=[1, 2, 3], mode="forward").output == expected
    # Outside a stream the same node still needs its state.
    assert failed(ex(node), input=[1], mode="forward")["type"] == "MissingStateError"


@pytest.mark.parametrize("rows", [[1, 2, 3, 4, 5], np.arange(5.0), "text"])
def test_a_chunk_size_of_zero_is_one_chunk(rows: Any) -> None:
    output = done(stream("sm_count_chunk", chunk_size=0), input=rows).output
    assert (output == {"whole": "text"}) if isinstance(rows, str) else (list(output) == [5])


def test_a_barrier_sees_the_whole_input_at_the_flush() -> None:
    result = done(stream("sm_evolving", "sm_barrier"), input=[1.0, 1.0, 2.0])
    assert result.output == pytest.approx([1 / 7, 2 / 7, 4 / 7])


def test_only_numeric_arrays_are_chunked_and_rows_stay_whole() -> None:
    rows = [[1, 2], [3, 4], [5, 6]]
    assert done(stream("sm_count_chunk"), input=rows).output == [2, 1]
    array = done(stream("sm_count_chunk"), input=np.arange(5.0)).output
    assert list(array) == [2, 2, 1]
    # Not an array: one chunk, and an output that is not an array is kept as is.
    assert done(stream("sm_count_chunk"), input="text").output == {"whole": "text"}


def test_a_stream_mode_that_does_not_exist_is_refused_by_name() -> None:
    with pytest.raises(CatalogError, match="node 'x': stream mode 'sideways' does not exist"):
        Catalog().register("x", lambda v: v, stream="sideways")


# --- loading ---------------------------------------------------------------------------


def test_unknown_fields_are_ignored_with_one_warning_naming_them() -> None:
    plan = {
        "Sequence": [
            {"Execute": {"node_id": "sm_inc", "retries": 3}},
            {
                "Loop": {
                    "node_id": "l",
                    "body": ex("sm_times10"),
                    "max_iterations": 1,
                    "schedule": "nightly",
                }
            },
        ]
    }
    result = done(plan, input=1)
    assert result.output == 20
    notes = [w for w in result.warnings if "ignored plan fields" in w]
    assert notes == [
        "ignored plan fields this version does not know: Execute.retries, Loop.schedule"
    ]
