"""The layout move changed no wire: a worker running the code from before the move
and a worker and producer of today's layout share one run, values crossing both ways.

Task names, Redis keys and JSON shapes are what workers and producers agree on; a
lab upgrades its machines one at a time, so an old worker must keep serving a new
producer. The old code is taken from git history (``OLD_LAYOUT``, the last commit
before the move); a clone without that history skips, saying so.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import NodeFailedError
from somatize_tasks.runtime.producer.submit import submit_plan
from testkit.plans import ex, remote, seq
from testkit.workers import REPO, WorkerFactory

#: The last commit whose modules sat in the old, flat layout.
OLD_LAYOUT = "f942aff"


@pytest.fixture(scope="module")
def old_tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    where = tmp_path_factory.mktemp("old-layout")
    archive = where / "old.tar"
    made = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", "-o", str(archive), OLD_LAYOUT],
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        pytest.skip(f"commit {OLD_LAYOUT} is not in this clone's history: {made.stderr.strip()}")
    with tarfile.open(archive) as tar:
        tar.extractall(where / "src", filter="data")
    source = where / "src"
    # A worker started there must import the old modules, not this checkout's.
    seen = subprocess.run(
        [sys.executable, "-c", "import somatize_tasks.keys as k; print(k.__file__)"],
        cwd=source,
        env={**os.environ, "PYTHONPATH": str(source)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert seen.stdout.startswith(str(source)), seen.stdout
    yield source


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    raises=NodeFailedError,
    reason="fencing changed the wire: a value a fenced execution writes has a key of its "
    "own, named by an ``attempt`` field in its ArtifactRef, which a worker from before "
    "fencing refuses (its refs forbid unknown fields), so it fails the run, naming the "
    "field, when it reads such a value. Mixed-version runs need every worker upgraded.",
)
def test_an_old_layout_worker_and_a_new_one_share_a_run(
    old_tree: Path, worker_factory: WorkerFactory, settings: Settings
) -> None:
    old = worker_factory.start(
        "old-layout",
        tags="oldgpu",
        source=old_tree,
        nodes="somatize_tasks.examples.nodes,tests.runtime.run_nodes",
    )
    assert "somatize_tasks/runtime/tasks.py" not in old.log()  # no traceback from the old code
    new = worker_factory.start("new-layout", tags="newcpu")
    try:
        # rt_make's list (400 numbers: through the store, not inline) crosses from the
        # new worker to the old one (rt_scale), and that list crosses back (rt_sum).
        plan = seq(
            remote("newcpu", ex("rt_make")),
            remote("oldgpu", ex("rt_scale")),
            remote("newcpu", ex("rt_sum")),
        )
        run = submit_plan(plan, settings=settings, require_workers=True)
        assert run.wait(timeout=120) == 2 * sum(i * 0.5 for i in range(400))
        ran_on = {node: status.worker for node, status in run.status().nodes.items()}
        assert ran_on == {
            "rt_make": new.worker_id,
            "rt_scale": old.worker_id,
            "rt_sum": new.worker_id,
        }, ran_on
        assert len(run.status().transfers) >= 2, run.status().transfers
    finally:
        old.stop()
        new.stop()
