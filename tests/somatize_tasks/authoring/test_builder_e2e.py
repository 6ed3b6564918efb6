"""A built plan and the same plan written as JSON run alike on real workers."""

from __future__ import annotations

from typing import Any

import pytest

from somatize_tasks.config.settings import Settings
from somatize_tasks.runtime.producer.handle import PlanRun
from somatize_tasks.runtime.producer.submit import submit_plan
from testkit.workers import WorkerProcess
from tests.somatize_tasks.authoring.cases import cases

pytestmark = pytest.mark.slow
Workers = tuple[WorkerProcess, WorkerProcess]


def finished(run: PlanRun) -> tuple[Any, dict[str, str]]:
    output = run.wait(timeout=60)
    return output, {n: s.state for n, s in run.status().nodes.items()}


def test_every_variant_built_or_written_as_json_runs_alike_on_the_workers(
    settings: Settings, two_workers: Workers
) -> None:
    gpu, _ = two_workers
    for case in cases(worker_id=gpu.worker_id):
        from_json = submit_plan(
            case.wire,
            input=case.input,
            params=case.params,
            ops=case.ops,
            settings=settings,
            require_workers=case.name != "empty",
        )
        from_piece = submit_plan(
            case.piece,
            input=case.input,
            settings=settings,
            require_workers=case.name != "empty",
        )
        json_output, json_nodes = finished(from_json)
        piece_output, piece_nodes = finished(from_piece)
        assert piece_output == json_output, case.name
        assert piece_nodes == json_nodes, case.name
        assert all(state in ("done", "skipped") for state in piece_nodes.values()), case.name
        if case.name == "remote_worker":
            assert from_piece.status().nodes["rt_where"].worker == gpu.worker_id
        if case.name == "remote_tag":
            assert from_piece.status().nodes["rt_sum"].worker == gpu.worker_id
