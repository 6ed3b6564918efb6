"""Soma bundles on two real workers that hold no hand-written catalog module, and a
cluster fit exported as a bundle that loads back with the states it learned."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from redis import Redis

from somatize_tasks.authoring.bundle import read_soma_bundle
from somatize_tasks.config.settings import Settings
from somatize_tasks.runtime.producer.submit import submit_plan
from testkit.workers import WorkerFactory, WorkerProcess, wait_idle
from tests.somatize_tasks.authoring.soma_save import (
    EDGES,
    JSON_STATES,
    NODES,
    TENSOR_STATES,
    by_hand,
    soma_save,
)
from tests.somatize_tasks.cli.test_cli_runs import cli

pytestmark = pytest.mark.slow
X = [1.0, 2.0, 3.0]


@pytest.fixture(scope="module")
def bundle_settings(settings: Settings) -> Iterator[Settings]:
    prefix = f"{settings.key_prefix}-bdl"
    yield settings.model_copy(update={"key_prefix": prefix})
    client = Redis.from_url(settings.redis_url)
    for key in client.scan_iter(match=f"{prefix}*", count=1000):
        client.delete(key)


@pytest.fixture(scope="module")
def bundle_workers(
    bundle_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[WorkerProcess, WorkerProcess]]:
    """Two workers with an empty catalog, allowed to import testkit.soma_filters."""
    factory = WorkerFactory(bundle_settings, tmp_path_factory.mktemp("bundle-workers"))
    allow = ("--allowed-modules", "testkit.soma_filters")
    try:
        one = factory.start("b1", tags="cpu", nodes="", options=allow, concurrency=1, wait=False)
        two = factory.start("b2", tags="cpu", nodes="", options=allow, concurrency=1, wait=False)
        factory.wait_live(one)
        factory.wait_live(two)
        assert "[catalog] 0 nodes" in one.log()
        assert "bundle classes from: testkit.soma_filters" in one.log()
        yield one, two
    finally:
        factory.close()


@pytest.mark.parametrize("states", ["json", "safetensors"])
def test_a_bundle_runs_forward_on_two_workers_with_no_catalog_module(
    bundle_settings: Settings,
    bundle_workers: tuple[WorkerProcess, WorkerProcess],
    tmp_path: Path,
    states: str,
) -> None:
    path = soma_save(
        tmp_path / "model.zip",
        NODES,
        EDGES,
        json_states=JSON_STATES if states == "json" else None,
        tensor_states=TENSOR_STATES if states == "safetensors" else None,
    )
    wait_idle(bundle_settings)  # both free: the parallel pair spreads over the two
    run = submit_plan(path, input=X, settings=bundle_settings, require_workers=True)
    assert run.wait(timeout=60) == by_hand(X) == {"keys": ["affine", "centre"], "total": 30.0}
    ran_on = {n.worker for n in run.status().nodes.values()}
    assert ran_on == {w.worker_id for w in bundle_workers}  # the parallel pair spread out
    assert run.states() == {}  # forward: the bundle's states were used, none learned


def test_a_cluster_fit_exported_as_a_bundle_loads_back_with_its_states(
    bundle_settings: Settings,
    bundle_workers: tuple[WorkerProcess, WorkerProcess],
    tmp_path: Path,
) -> None:
    untrained = soma_save(tmp_path / "untrained.zip", NODES, EDGES)
    y = [5.0, 9.0, 13.0]  # affine learns w=2, b=1 from the scaled input 2, 4, 6
    fit = submit_plan(
        untrained, input=X, mode="fit", y=y, settings=bundle_settings, require_workers=True
    )
    # refitted: centre's mean is now 4, so its part sums to 0; affine gives 5, 9, 13
    assert fit.wait(timeout=60) == {"keys": ["affine", "centre"], "total": 27.0}
    learned = fit.states()
    assert set(learned) == {"centre", "affine"}
    exported = cli(
        "states",
        "export",
        fit.id,
        "--bundle",
        str(tmp_path / "fitted.zip"),
        settings=bundle_settings,
    )
    assert exported.returncode == 0, exported.stderr
    assert "wrote a Soma bundle with the states of 2 nodes (affine, centre)" in exported.stdout
    back = read_soma_bundle(tmp_path / "fitted.zip")
    assert back.states["centre"] == learned["centre"] == {"mean": 4.0}
    for name in ("w", "b"):
        np.testing.assert_allclose(back.states["affine"][name], learned["affine"][name])
    np.testing.assert_allclose(back.states["affine"]["w"], [2.0])
    assert back.states["affine"]["note"] == "fitted"
    with zipfile.ZipFile(tmp_path / "fitted.zip") as zf:
        manifest = json.loads(zf.read("manifest.json"))
        assert "states/affine.safetensors" in zf.namelist()
    assert manifest["soma_checkpoint_format"] == 1
    by_id = {n["id"]: n for n in NODES}
    written = [
        (n["id"], n["class_path"], n["class_version"], n["kwargs"])
        for n in manifest["topology"]["nodes"]
    ]
    assert written == [
        (i, by_id[i]["class_path"], by_id[i].get("class_version", 1), by_id[i]["kwargs"])
        for i in ("scale", "affine", "centre", "join")  # the plan's order
    ]
    edges = [(e["source"], e["target"]) for e in manifest["topology"]["edges"]]
    assert sorted(edges) == sorted(EDGES)
    forward = submit_plan(
        tmp_path / "fitted.zip", input=[0.0, 1.0], settings=bundle_settings, require_workers=True
    )
    assert forward.wait(timeout=60) == {"keys": ["affine", "centre"], "total": -6.0 + 6.0}


def test_submit_takes_a_bundle_on_the_command_line(
    bundle_settings: Settings,
    bundle_workers: tuple[WorkerProcess, WorkerProcess],
    tmp_path: Path,
) -> None:
    path = soma_save(tmp_path / "model.zip", NODES, EDGES, json_states=JSON_STATES)
    (tmp_path / "in.json").write_text(json.dumps(X))
    done = cli(
        "submit",
        str(path),
        "--input",
        str(tmp_path / "in.json"),
        "--wait",
        "--json",
        settings=bundle_settings,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == by_hand(X)
