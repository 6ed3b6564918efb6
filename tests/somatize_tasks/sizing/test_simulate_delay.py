"""The dispatch-delay model against a queue simulated call by call, and its edges."""

from __future__ import annotations

import pytest

from somatize_tasks.sizing.delay import (
    Kind,
    dispatch_quantile_ms,
    path_quantiles,
    queue_waits,
    utilisation,
)
from somatize_tasks.sizing.simulate import Cluster, Costs, predict

#: Redis at rho = 0.6: small calls, a middling one, and a rarer long read.
MIX: list[Kind] = [(20_000.0, 20e-6), (500.0, 300e-6), (20.0, 2.5e-3)]


@pytest.mark.parametrize("mix", [[(30_000.0, 20e-6)], MIX], ids=["M/D/1", "mix"])
def test_the_queue_has_the_mean_wait_and_idle_share_queueing_theory_gives(
    mix: list[Kind],
) -> None:
    """Pollaczek-Khinchine: mean wait = sum(rate * s^2) / (2 (1 - rho)); a Poisson
    arrival finds Redis busy with probability rho."""
    rho = utilisation(mix)
    assert rho == pytest.approx(0.6)
    waits = queue_waits(mix, customers=400_000)
    mean = sum(rate * service**2 for rate, service in mix) / (2 * (1 - rho))
    assert sum(waits) / len(waits) == pytest.approx(mean, rel=0.15)
    assert sum(w > 0 for w in waits) / len(waits) == pytest.approx(rho, abs=0.02)


def test_the_path_alone_below_saturation_and_none_above() -> None:
    path = path_quantiles([float(i) for i in range(1, 201)])
    assert path[0] == 1.0 and path[-1] == 200.0 and path == sorted(path)
    alone = dispatch_quantile_ms(path, 0, [])
    assert alone == pytest.approx(198.0, rel=0.01)
    assert dispatch_quantile_ms(path, 10, [(100.0, 20e-6)]) == pytest.approx(alone, rel=0.01)
    mean_wait_ms = 0.22  # Pollaczek-Khinchine for MIX; the p99 of ten is well above ten means
    assert (dispatch_quantile_ms([5.0, 5.0], 10, MIX) or 0) > 5.0 + 10 * mean_wait_ms
    assert dispatch_quantile_ms(path, 10, [(60_000.0, 20e-6)]) is None
    with pytest.raises(ValueError, match="saturated"):
        queue_waits([(60_000.0, 20e-6)])
    with pytest.raises(ValueError, match="two"):
        path_quantiles([1.0])


def test_ten_thousand_workers_wait_in_redis_when_celery_polls_elsewhere() -> None:
    costs = Costs()
    small = predict(Cluster(workers=1_000, celery_workers=0, runs=1, plan_size=100), costs)
    large = predict(Cluster(workers=10_000, celery_workers=0, runs=1, plan_size=100), costs)
    assert small.dispatch_queue_ms is not None and large.dispatch_queue_ms is not None
    assert 0 <= small.dispatch_queue_ms < large.dispatch_queue_ms
    assert predict(Cluster(workers=10_000, runs=1, plan_size=100), costs).dispatch_p99_ms is None
