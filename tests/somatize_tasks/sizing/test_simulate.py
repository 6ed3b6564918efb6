"""The simulator's arithmetic: it runs, grows as it should, and says when Redis saturates."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner

from somatize_tasks.cli import main
from somatize_tasks.sizing.calibrate import fit_power
from somatize_tasks.sizing.simulate import Cluster, Costs, predict


def test_more_workers_cost_more_and_saturation_is_reported() -> None:
    costs = Costs()
    small, large = predict(Cluster(workers=100), costs), predict(Cluster(workers=10_000), costs)
    assert 0 < small.cpu < large.cpu and small.memory_bytes < large.memory_bytes
    busy = predict(Cluster(workers=10_000, plan_size=100_000, runs=10, node_s=0.01), costs)
    assert busy.cpu > 1 and busy.dispatch_p99_ms is None


def test_the_cli_prints_cpu_memory_and_delay() -> None:
    result = CliRunner().invoke(
        main, ["simulate", "--workers", "10000", "--plan-size", "1000", "--runs", "2"]
    )
    assert result.exit_code == 0, result.output
    assert "Redis CPU" in result.output and "MiB" in result.output and "p99" in result.output


def test_the_light_calls_power_law_is_recovered_from_paced_measurements() -> None:
    idle = 0.001
    points = [(idle + 1.2e-4 * (2 * rate) ** 0.8, rate) for rate in (50.0, 200.0, 1000.0)]
    k, alpha = fit_power(points, idle)
    assert alpha == pytest.approx(0.8) and k == pytest.approx(1.2e-4)


def test_calibrating_on_an_unreachable_redis_is_one_clear_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = CliRunner().invoke(
        main, ["simulate", "--workers", "10", "--calibrate", f"redis://127.0.0.1:{port}/0"]
    )
    assert result.exit_code == 1
    assert f"cannot calibrate on redis://127.0.0.1:{port}/0" in result.output
    assert "Traceback" not in result.output
