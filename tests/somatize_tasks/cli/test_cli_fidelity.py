"""Plan documents and bare ``"Empty"`` plans through every command, as a user types them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from somatize_tasks.config.settings import Settings
from testkit.plans import ex, seq
from testkit.workers import WorkerProcess
from tests.somatize_tasks.cli.test_cli_runs import cli, write

NODES = ("--nodes", "testkit.nodes.soma_nodes,testkit.nodes.run_nodes")
DOCUMENT = {
    "plan": seq(ex("sm_inc"), ex("sm_times10"), ex("rt_double")),
    "predecessors": {"sm_times10": ["sm_inc"], "rt_double": ["sm_inc"]},
}


def test_run_takes_a_plan_document_and_an_empty_plan(tmp_path: Path) -> None:
    given = write(tmp_path, "in.json", 1)
    done = cli("run", write(tmp_path, "doc.json", DOCUMENT), *NODES, "--input", given, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == 4  # rt_double reads sm_inc (a skip edge)
    empty = cli("run", write(tmp_path, "empty.json", "Empty"), "--json")
    assert empty.returncode == 0, empty.stderr
    assert json.loads(empty.stdout) is None


def test_plan_places_a_document_and_draws_its_transfers_from_the_graph(tmp_path: Path) -> None:
    workers = [
        {"id": "w1", "name": "a", "max_concurrent": 1},
        {"id": "w2", "name": "b", "max_concurrent": 1},
    ]
    plan = {"Sequence": [ex("a"), {"Parallel": [ex("b"), ex("c")]}, ex("d")]}
    document = {"plan": plan, "workers": workers, "predecessors": {"d": ["a"]}}
    shown = cli("plan", write(tmp_path, "in.json", document), "--json")
    assert shown.returncode == 0, shown.stderr
    crossed = [(t["from_node"], t["to_node"]) for t in json.loads(shown.stdout)["data_transfers"]]
    assert crossed == []  # d reads only a, on the same worker; b and c feed nothing
    bad = cli("plan", write(tmp_path, "bad.json", {**document, "predecessors": {"d": ["zz"]}}))
    assert bad.returncode == 1
    assert "predecessors.d[0]: 'zz'" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.slow
def test_submit_takes_a_document_and_an_empty_plan_on_workers(
    tmp_path: Path, settings: Settings, two_workers: tuple[WorkerProcess, WorkerProcess]
) -> None:
    given = write(tmp_path, "in.json", 1)
    done = cli(
        "submit",
        write(tmp_path, "doc.json", DOCUMENT),
        "--input",
        given,
        "--wait",
        "--json",
        "--require-workers",
        settings=settings,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == 4
    empty = cli(
        "submit", write(tmp_path, "empty.json", "Empty"), "--wait", "--json", settings=settings
    )
    assert empty.returncode == 0, empty.stderr
    assert json.loads(empty.stdout) is None
