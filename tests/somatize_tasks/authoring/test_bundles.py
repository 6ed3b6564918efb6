"""Soma checkpoint bundles run as they are: read, compiled as Soma compiles, run forward."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from somatize_tasks.authoring.bundle import (
    BundleNode,
    read_soma_bundle,
    write_soma_bundle,
)
from somatize_tasks.authoring.topology import plan_of_graph, topological_order
from somatize_tasks.catalog.entries import Catalog
from somatize_tasks.errors import BundleError
from somatize_tasks.runtime.producer.local import run_local
from testkit.workers import REPO
from tests.somatize_tasks.authoring.soma_save import (
    EDGES,
    JSON_STATES,
    NODES,
    TENSOR_STATES,
    by_hand,
    soma_save,
)

X = [1.0, 2.0, 3.0]
ALLOWED = ("testkit.soma_filters",)


def allowing(*prefixes: str) -> Catalog:
    """A catalog of its own (nothing registered by hand), allowing ``prefixes``."""
    catalog = Catalog()
    catalog.allowed_modules = prefixes
    return catalog


@pytest.fixture(params=["json", "safetensors"])
def bundle(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    if request.param == "json":
        return soma_save(tmp_path / "model.zip", NODES, EDGES, json_states=JSON_STATES)
    return soma_save(tmp_path / "model.zip", NODES, EDGES, tensor_states=TENSOR_STATES)


def test_a_bundle_compiles_to_the_plan_soma_compiles(bundle: Path) -> None:
    built = read_soma_bundle(bundle).built()
    ex = [{"Execute": {"node_id": n}} for n in ("scale", "affine", "centre", "join")]
    assert built.to_wire() == {
        "plan": {"Sequence": [ex[0], {"Parallel": ex[1:3]}, ex[3]]},
        "predecessors": {
            "scale": [],
            "centre": ["scale"],
            "affine": ["scale"],
            "join": ["centre", "affine"],
        },
    }
    assert built.params == {"scale": {"factor": 2.0}, "affine": {"note": "fitted"}}
    assert built.ops["affine"] == "class:testkit.soma_filters.Affine@2"


def test_json_states_and_safetensors_states_read_as_their_values(tmp_path: Path) -> None:
    from_json = read_soma_bundle(soma_save(tmp_path / "j.zip", NODES, EDGES, JSON_STATES))
    assert from_json.states == JSON_STATES
    from_tensors = read_soma_bundle(
        soma_save(tmp_path / "t.zip", NODES, EDGES, tensor_states=TENSOR_STATES)
    ).states
    assert from_tensors["centre"] == {"mean": 3.0}
    affine = from_tensors["affine"]
    assert affine["note"] == "fitted"
    assert isinstance(affine["w"], np.ndarray) and affine["w"].tolist() == [2.0]
    assert affine["b"].tolist() == [1.0]


def test_a_bundle_runs_forward_with_its_states_and_computes_what_the_classes_do(
    bundle: Path,
) -> None:
    result = run_local(bundle, input=X, catalog=allowing(*ALLOWED))
    assert result.status == "done", result.error
    expected = by_hand(X)
    assert result.output == expected == {"keys": ["affine", "centre"], "total": 30.0}
    assert result.states == {}  # a forward run: nothing refitted (a fit would move 'mean')


def test_a_bundle_can_be_refitted_with_mode_fit(bundle: Path) -> None:
    result = run_local(bundle, input=X, mode="fit", y=X, catalog=allowing(*ALLOWED))
    assert result.status == "done", result.error
    assert result.states["centre"] == {"mean": 4.0}  # the mean of 2, 4, 6


def test_a_class_outside_the_allowed_modules_is_refused_in_one_line(tmp_path: Path) -> None:
    nodes = [{"id": "trap", "class_path": "somatize_never_imported.Filter"}]
    result = run_local(soma_save(tmp_path / "m.zip", nodes, []), catalog=allowing("mylab"))
    assert result.status == "failed"
    error: dict[str, Any] = result.error or {}
    assert error["node_id"] == "trap"
    message = error["message"]
    assert "\n" not in message
    assert message == (
        "class_path 'somatize_never_imported.Filter' is outside the allowed modules "
        "(SOMATIZE_ALLOWED_MODULES=mylab); add its module's prefix there to run it"
    )
    nothing = run_local(soma_save(tmp_path / "n.zip", NODES, EDGES), catalog=allowing())
    assert "SOMATIZE_ALLOWED_MODULES=(none)" in (nothing.error or {})["message"]


def test_a_class_version_mismatch_is_refused_as_graph_load_refuses_it(tmp_path: Path) -> None:
    nodes = [{**NODES[2], "class_version": 1}]
    result = run_local(
        soma_save(tmp_path / "m.zip", nodes, []), input=X, catalog=allowing(*ALLOWED)
    )
    assert result.status == "failed"
    assert "class_version mismatch" in (result.error or {})["message"]


def test_a_bundle_without_edges_is_a_chain_in_node_order(tmp_path: Path) -> None:
    nodes = [NODES[0], NODES[1]]
    bundle = read_soma_bundle(soma_save(tmp_path / "m.zip", nodes, [], JSON_STATES))
    assert bundle.built().to_wire()["plan"] == {
        "Sequence": [{"Execute": {"node_id": "scale"}}, {"Execute": {"node_id": "centre"}}]
    }
    result = run_local(bundle, input=X, catalog=allowing(*ALLOWED))
    assert result.output == [-1.0, 1.0, 3.0]


def test_the_topological_order_is_somas() -> None:
    # Roots are seeded sorted and taken from the end; freed successors smallest first.
    assert topological_order(["a", "b", "c"], []) == ["c", "b", "a"]
    assert topological_order(["r", "z", "m"], [("r", "z"), ("r", "m")]) == ["r", "m", "z"]
    assert plan_of_graph(["b", "a"], []) == {
        "Parallel": [{"Execute": {"node_id": "b"}}, {"Execute": {"node_id": "a"}}]
    }
    assert plan_of_graph([], []) == "Empty"
    with pytest.raises(BundleError, match="cycle through a, b"):
        topological_order(["a", "b"], [("a", "b"), ("b", "a")])


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        ({"topology": {"nodes": [{"id": "a", "class_path": "Nope"}]}}, r"nodes\[0\].class_path"),
        ({"topology": {"nodes": "x"}}, "topology.nodes must be a list"),
        ({"soma_checkpoint_format": 9, "topology": {"nodes": []}}, "format version 9"),
        (
            {"topology": {"nodes": [{"id": "a", "class_path": "m.A"}], "edges": [{"source": "a"}]}},
            r"edges\[0\].target None is not a node",
        ),
        (
            {"topology": {"nodes": [{"id": "a", "class_path": "m.A"}] * 2}},
            "node id 'a' is listed twice",
        ),
    ],
)
def test_a_bad_manifest_is_one_error_naming_the_field(
    tmp_path: Path, manifest: dict[str, Any], expected: str
) -> None:
    path = tmp_path / "bad.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("manifest.json", json.dumps(manifest))
    with pytest.raises(BundleError, match=expected):
        read_soma_bundle(path)


def test_not_a_bundle_is_one_error(tmp_path: Path) -> None:
    (tmp_path / "x.zip").write_text("not a zip")
    with pytest.raises(BundleError, match="is not a zip bundle"):
        read_soma_bundle(tmp_path / "x.zip")
    with pytest.raises(BundleError, match="does not exist"):
        read_soma_bundle(tmp_path / "missing.zip")
    with zipfile.ZipFile(tmp_path / "empty.zip", "w") as zf:
        zf.writestr("other.txt", "")
    with pytest.raises(BundleError, match=r"no manifest.json in it"):
        read_soma_bundle(tmp_path / "empty.zip")


def test_the_writer_round_trips_every_state_form(tmp_path: Path) -> None:
    states = {
        "json": {"mean": 1.5, "names": ["a"]},
        "array": np.arange(6, dtype=np.float32).reshape(2, 3),
        "mixed": {"w": np.ones(2), "lr": 0.1},
    }
    nodes = [BundleNode(n, f"m.{n.title()}") for n in states]
    write_soma_bundle(tmp_path / "w.zip", nodes, [("json", "array")], states)
    back = read_soma_bundle(tmp_path / "w.zip")
    assert back.states["json"] == states["json"]
    np.testing.assert_array_equal(back.states["array"], states["array"])
    assert back.states["array"].dtype == np.float32
    assert back.states["mixed"]["lr"] == 0.1
    np.testing.assert_array_equal(back.states["mixed"]["w"], np.ones(2))
    with zipfile.ZipFile(tmp_path / "w.zip") as zf:
        assert sorted(zf.namelist()) == [
            "manifest.json",
            "states/array.safetensors",
            "states/json.json",
            "states/mixed.json",
            "states/mixed.safetensors",
        ]


def run_cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: PLW1510 - callers assert on the return code
        [sys.executable, "-m", "somatize_tasks", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), **env},
    )


def test_run_and_plan_take_a_bundle_on_the_command_line(bundle: Path, tmp_path: Path) -> None:
    (tmp_path / "in.json").write_text(json.dumps(X))
    done = run_cli(
        "run",
        str(bundle),
        "--input",
        str(tmp_path / "in.json"),
        "--json",
        cwd=tmp_path,
        SOMATIZE_ALLOWED_MODULES="testkit.soma_filters",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == by_hand(X)
    refused = run_cli("run", str(bundle), "--input", str(tmp_path / "in.json"), cwd=tmp_path)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        "Error: node 'scale' failed: ModuleNotAllowedError: class_path "
        "'testkit.soma_filters.Scale' is outside the allowed modules "
        "(SOMATIZE_ALLOWED_MODULES=(none)); add its module's prefix there to run it"
    ]
    workers = tmp_path / "workers.json"
    workers.write_text(json.dumps([{"id": "w1", "name": "one", "max_concurrent": 4}]))
    placed = run_cli("plan", str(bundle), "--workers", str(workers), "--json", cwd=tmp_path)
    assert placed.returncode == 0, placed.stderr
    assigned = {a["node_id"] for a in json.loads(placed.stdout)["assignments"]}
    assert assigned == {"scale", "centre", "affine", "join"}
