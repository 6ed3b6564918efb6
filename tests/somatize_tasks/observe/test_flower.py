"""Real Flower (``celery -A somatize_tasks flower``) watching a real run on real workers.

Node and transfer tasks must show in Flower with readable names and
arguments (run id and node id, never the values) and on the worker that
ran them; the API must refuse a request without the password. The name
column itself says which node a row is (Celery's ``shadow`` name,
``node:train_svm``), so nobody has to open a task to find out.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from somatize_tasks import submit_plan
from somatize_tasks.config.settings import Settings
from testkit.plans import FORK_JOIN, FORK_JOIN_OPS, FORK_JOIN_OUTPUT
from testkit.services import free_port, wait_for
from testkit.workers import REPO, WorkerProcess
from tests.somatize_tasks.cli.helpers import stop_group

pytestmark = pytest.mark.slow
USER, PASSWORD = "admin", "flower-test-secret"


@dataclass
class Flower:
    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def workers_seen(self) -> set[str]:
        """Worker ids Flower knows from their events (so its event receiver is running)."""
        status, page = self.get("/workers?json=1")
        if status != 200:
            return set()
        return {w["hostname"].split("@")[0] for w in page["data"] if w.get("status")}

    def get(self, path: str, *, auth: bool = True) -> tuple[int, Any]:
        request = urllib.request.Request(self.url + path)
        if auth:
            token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, None


@pytest.fixture(scope="session")
def flower(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flower]:
    port = free_port()
    log_path = tmp_path_factory.mktemp("flower") / "flower.log"
    env = {**os.environ, **settings.to_env()}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "somatize_tasks",
        "flower",
        f"--port={port}",
        "--address=127.0.0.1",
        f"--basic-auth={USER}:{PASSWORD}",
    ]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    running = Flower(f"http://127.0.0.1:{port}", proc, log_path)
    try:

        def up() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"flower exited:\n{log_path.read_text()}")
            with contextlib.suppress(OSError):
                return running.get("/api/workers")[0] == 200
            return False

        assert wait_for(up, 60, 0.2), log_path.read_text()
        yield running
    finally:
        stop_group(proc)


def test_the_api_needs_the_password(flower: Flower) -> None:
    assert flower.get("/api/tasks", auth=False)[0] == 401
    assert flower.get("/api/tasks")[0] == 200


def _tasks_of_run(flower: Flower, run_id: str) -> dict[str, dict[str, Any]]:
    status, tasks = flower.get("/api/tasks?limit=1000")
    assert status == 200
    return {
        task_id: task
        for task_id, task in tasks.items()
        if f"run={run_id}" in f"{task.get('args')} {task.get('kwargs')}"
    }


def test_node_and_transfer_tasks_show_readably_on_their_workers(
    flower: Flower, settings: Settings, two_workers: tuple[WorkerProcess, WorkerProcess]
) -> None:
    gpu, cpu = two_workers
    # Flower answers HTTP before its event receiver consumes; events sent before
    # that are lost to it. Its workers page lists what the events have shown.
    assert wait_for(lambda: {gpu.worker_id, cpu.worker_id} <= flower.workers_seen(), 30, 0.3)
    run = submit_plan(FORK_JOIN, ops=FORK_JOIN_OPS, settings=settings, require_workers=True)
    assert run.wait(timeout=60) == FORK_JOIN_OUTPUT
    status = run.status()
    node_workers = {n: s.worker for n, s in status.nodes.items()}
    crossing = [t for t in status.transfers if t["transfer_type"] == "s3"]
    assert crossing, f"the plan moved no value through the store: {status.transfers}"

    def seen_all() -> bool:
        tasks = _tasks_of_run(flower, run.id).values()
        names = [t["name"] for t in tasks if t.get("worker") and t.get("state") == "SUCCESS"]
        shown = [n for name in names if name.startswith("node:") for n in _named_nodes(name)]
        return (
            len(shown) >= len(status.nodes)
            and any(n.startswith("transfer:upload ") for n in names)
            and any(n.startswith("transfer:download ") for n in names)
            and all(n.endswith(f" run:{run.id[:6]}") for n in names)
        )

    assert wait_for(seen_all, 20, 0.3), sorted(
        (t["name"], t.get("state"), bool(t.get("worker")))
        for t in _tasks_of_run(flower, run.id).values()
    )
    tasks = list(_tasks_of_run(flower, run.id).values())
    for task in tasks:
        shown = f"{task['args']} {task['kwargs']}"
        # Ids only: no value, no artifact ref (a dict), no inline payload.
        assert len(shown) < 200 and "{" not in shown.replace("{}", ""), shown

    nodes = [t for t in tasks if t["name"].startswith("node:")]
    # A fused chain or a batch of blocks is one message: node:a+b.
    shown_nodes = {n: t for t in nodes for n in _named_nodes(t["name"])}
    # The name says which run the row belongs to: node:rt_make run:1a2b3c.
    assert all(t["name"].endswith(f" run:{run.id[:6]}") for t in nodes)
    assert set(shown_nodes) == set(node_workers), [t["name"] for t in nodes]
    for node_id, task in shown_nodes.items():
        assert _fields(task["kwargs"])["run"] == run.id
        assert node_id in _fields(task["kwargs"])["node"].split("+")
        assert task["worker"].startswith(f"{node_workers[node_id]}@"), (node_id, task)

    for record in crossing:
        route = f"{record['from_node']} {record['from_worker']}->{record['to_worker']}"
        label = f"run={run.id} node={route}"
        tag = f"run:{run.id[:6]}"
        upload = [
            t for t in tasks if t["name"] == f"transfer:upload {route} {tag}" and t["args"] == label
        ]
        download = [
            t
            for t in tasks
            if t["name"] == f"transfer:download {route} {tag}" and t["args"] == label
        ]
        assert upload and download, (label, [(t["name"], t["args"]) for t in tasks])
        assert all(t["worker"].startswith(f"{record['from_worker']}@") for t in upload)
        assert all(t["worker"].startswith(f"{record['to_worker']}@") for t in download)
    assert {gpu.worker_id, cpu.worker_id} <= {t["worker"].split("@")[0] for t in tasks}


def test_the_task_list_page_names_nodes(
    flower: Flower, settings: Settings, two_workers: tuple[WorkerProcess, WorkerProcess]
) -> None:
    """What a person sees: Flower's task list (its datatable feed) shows node ids as names."""
    run = submit_plan(FORK_JOIN, ops=FORK_JOIN_OPS, settings=settings, require_workers=True)
    assert run.wait(timeout=60) == FORK_JOIN_OUTPUT
    wanted = set(run.status().nodes)

    query = urllib.parse.urlencode(
        {
            "draw": 1,
            "start": 0,
            "length": 1000,
            "search[value]": "",
            "order[0][column]": 0,
            "columns[0][data]": "received",
            "order[0][dir]": "desc",
        }
    )

    def listed() -> set[str]:
        status, page = flower.get(f"/tasks/datatable?{query}")
        if status != 200:
            return set()
        return {
            node
            for row in page["data"]
            if f"run={run.id}" in f"{row.get('args')} {row.get('kwargs')}"
            and row["name"].startswith("node:")
            for node in _named_nodes(row["name"])
        }

    assert wait_for(lambda: wanted <= listed(), 20, 0.3), (wanted, listed())


def _named_nodes(name: str) -> list[str]:
    """``node:a+b run:1a2b3c`` -> ["a", "b"]."""
    return name.removeprefix("node:").rsplit(" run:", 1)[0].split("+")


def _fields(shown: str) -> dict[str, str]:
    """``run=abc node=x`` -> {"run": "abc", "node": "x"}."""
    return dict(part.split("=", 1) for part in shown.split() if "=" in part)
