"""Soma's semantics on real workers: fit then forward across workers, graph edges
with their transfers, Soma's loop cap, and the CLI's fit/forward round trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import NodeFailedError
from somatize_tasks.runtime.producer.submit import submit_plan
from testkit.nodes import soma_nodes
from testkit.plans import ex, par, remote, seq
from testkit.workers import WorkerProcess, wait_idle
from tests.somatize_tasks.cli.test_cli_runs import cli, write
from tests.somatize_tasks.runtime.test_fidelity import X_NEW, X_TRAIN, Y_TRAIN

pytestmark = pytest.mark.slow
Workers = tuple[WorkerProcess, WorkerProcess]
# The classifier runs on the gpu worker: its state and its input cross workers.
PIPELINE = seq(ex("sm_standardise"), remote("gpu", ex("sm_centroids")))


def by_hand() -> tuple[list[str], dict[str, object]]:
    scaler, classifier = soma_nodes.Standardise(), soma_nodes.NearestCentroid()
    scale_state = scaler.fit(X_TRAIN)
    class_state = classifier.fit(scaler.forward(X_TRAIN, scale_state), Y_TRAIN)
    predictions = classifier.forward(scaler.forward(X_NEW, scale_state), class_state)
    return predictions, {"sm_standardise": scale_state, "sm_centroids": class_state}


def test_fit_on_the_cluster_then_forward_predicts_what_fitting_by_hand_predicts(
    settings: Settings, two_workers: Workers, tmp_path: Path
) -> None:
    gpu, _ = two_workers
    expected, states = by_hand()
    fit = submit_plan(
        PIPELINE, input=X_TRAIN, mode="fit", y=Y_TRAIN, settings=settings, require_workers=True
    )
    fit.wait(timeout=60)
    assert fit.status().nodes["sm_centroids"].worker == gpu.worker_id
    assert fit.states() == states
    forward = submit_plan(
        PIPELINE, input=X_NEW, states_from=fit.id, settings=settings, require_workers=True
    )
    assert forward.wait(timeout=60) == expected == ["low", "high"]
    assert forward.states() == {}  # a forward run never fits
    exported = cli("states", "export", fit.id, "-o", str(tmp_path / "s.json"), settings=settings)
    assert exported.returncode == 0, exported.stderr
    from_file = submit_plan(
        PIPELINE,
        input=X_NEW,
        states_from=tmp_path / "s.json",
        settings=settings,
        require_workers=True,
    )
    assert from_file.wait(timeout=60) == expected


def test_a_forward_run_without_states_fails_naming_the_node_on_its_worker(
    settings: Settings, two_workers: Workers
) -> None:
    run = submit_plan(
        PIPELINE, input=X_NEW, mode="forward", settings=settings, require_workers=True
    )
    with pytest.raises(NodeFailedError, match=r"node 'sm_standardise'.*no state"):
        run.wait(timeout=60)


def test_graph_edges_decide_inputs_and_transfers_across_workers(
    settings: Settings, two_workers: Workers
) -> None:
    plan = seq(
        ex("sm_inc"),
        par(remote("gpu", ex("sm_times10")), ex("rt_double")),
        ex("sm_pair"),
        ex("sm_describe"),
    )
    preds = {
        "sm_times10": ["sm_inc"],
        "rt_double": ["sm_inc"],
        "sm_pair": ["sm_times10", "rt_double"],
        "sm_describe": ["sm_inc"],
    }
    wait_idle(settings)  # placement spreads the branches over free slots
    run = submit_plan(
        {"plan": plan, "predecessors": preds}, input=1, settings=settings, require_workers=True
    )
    assert run.wait(timeout=60) == "float:2.0"  # a skip edge: sm_describe reads sm_inc
    assert run.result("sm_pair") == {"keys": ["rt_double", "sm_times10"], "sum": 24.0}
    status = run.status()
    worker = {n: s.worker for n, s in status.nodes.items()}
    edges = [(p, n) for n, ps in preds.items() for p in ps]
    expected = sorted(e for e in edges if worker[e[0]] != worker[e[1]])
    crossed = sorted(
        (t["from_node"], t["to_node"]) for t in status.transfers if t["from_node"] != "input"
    )  # the producer's run input
    planned = sorted((t.from_node, t.to_node) for t in run.distribution.data_transfers)
    assert crossed == planned == expected  # exactly the graph's cross-worker edges
    assert worker["sm_times10"] != worker["rt_double"] and expected  # branches spread


def test_a_loop_with_no_cap_whose_signal_never_stops_ends_after_100_passes(
    settings: Settings, two_workers: Workers
) -> None:
    body = seq(ex("sm_inc"), ex("sm_never_stop"))
    plan = {
        "Loop": {
            "node_id": "l",
            "body": body,
            "carry_from": "sm_inc",
            "until": {"type": "WhenSignaled", "node": "sm_never_stop"},
        }
    }
    run = submit_plan(plan, input=0, settings=settings, require_workers=True)
    assert run.wait(timeout=120) == 100
    assert any("100 passes" in w for w in run.warnings)


def test_somas_last_executor_rules_hold_on_workers(
    settings: Settings, two_workers: Workers
) -> None:
    """An unfitted stream node starts from None (Soma's Value::Empty) in both modes, a
    chunk_size of 0 is one chunk, and a Loop with an empty body passes its input on."""
    empty_loop = {"Loop": {"node_id": "l", "body": "Empty", "max_iterations": 4}}
    plan = seq(
        remote("gpu", {"Stream": {"node_ids": ["sm_fixed"], "chunk_size": 0}}),
        empty_loop,
        {"Stream": {"node_ids": ["sm_evolving_trained"], "chunk_size": 2}},
    )
    run = submit_plan(plan, input=[1.0, 2.0, 3.0], settings=settings, require_workers=True)
    assert run.wait(timeout=60) == [1.0, 3.0, 6.0]  # [1, 2, 3] untouched, then summed
    assert run.result("sm_fixed") == [1.0, 2.0, 3.0]
    assert run.status().nodes["sm_fixed"].worker == two_workers[0].worker_id


def test_the_cli_fits_here_and_forwards_with_the_states_file(tmp_path: Path) -> None:
    plan = write(tmp_path, "plan.json", seq(ex("sm_standardise"), ex("sm_centroids")))
    nodes = ("--nodes", "testkit.nodes.soma_nodes")
    fit = cli(
        "run",
        plan,
        *nodes,
        "--input",
        write(tmp_path, "x.json", X_TRAIN),
        "--mode",
        "fit",
        "--labels",
        write(tmp_path, "y.json", Y_TRAIN),
        "--states-out",
        str(tmp_path / "states.json"),
        "--json",
    )
    assert fit.returncode == 0, fit.stderr
    forward = cli(
        "run",
        plan,
        *nodes,
        "--input",
        write(tmp_path, "new.json", X_NEW),
        "--states-from",
        str(tmp_path / "states.json"),
        "--json",
    )
    assert forward.returncode == 0, forward.stderr
    assert json.loads(forward.stdout) == by_hand()[0]
    missing = cli("run", plan, *nodes, "--input", str(tmp_path / "new.json"), "--mode", "forward")
    assert missing.returncode == 1
    assert "node 'sm_standardise' is a trainable filter" in missing.stderr
    assert "Traceback" not in missing.stderr
