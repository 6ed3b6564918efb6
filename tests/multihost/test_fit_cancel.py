"""Fit on some hosts, forward on others with the states the fit kept; cancel across hosts."""

from __future__ import annotations

import time

import numpy as np
import pytest

from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import RunCancelledError
from somatize_tasks.runtime.producer.submit import submit_plan
from testkit.nodes import soma_nodes
from testkit.plans import ex, seq
from testkit.services import wait_for
from tests.multihost.fleet import HostWorkers
from tests.multihost.helpers import RUN_TIMEOUT_S, crossings, hosts_of, on

pytestmark = [pytest.mark.multihost, pytest.mark.slow]

_RNG = np.random.default_rng(11)
#: Two clusters of 150 rows each: big enough (~10 KB as JSON) to travel through S3.
X_TRAIN = np.vstack([_RNG.normal(0, 1, (150, 4)), _RNG.normal(8, 1, (150, 4))]).tolist()
Y_TRAIN = ["low"] * 150 + ["high"] * 150
X_NEW = np.vstack([_RNG.normal(0, 1, (40, 4)), _RNG.normal(8, 1, (40, 4))]).tolist()


def by_hand() -> tuple[list[str], dict[str, object]]:
    scaler, classifier = soma_nodes.Standardise(), soma_nodes.NearestCentroid()
    scale_state = scaler.fit(X_TRAIN)
    class_state = classifier.fit(scaler.forward(X_TRAIN, scale_state), Y_TRAIN)
    predictions = classifier.forward(scaler.forward(X_NEW, scale_state), class_state)
    return predictions, {"sm_standardise": scale_state, "sm_centroids": class_state}


def test_fit_on_two_hosts_then_forward_on_the_others_with_its_states(
    mh_settings: Settings, hosts: HostWorkers
) -> None:
    expected, states = by_hand()
    fit = submit_plan(
        seq(on("a", ex("sm_standardise")), on("b", ex("sm_centroids"))),
        input=X_TRAIN,
        mode="fit",
        y=Y_TRAIN,
        settings=mh_settings,
        require_workers=True,
    )
    fit.wait(timeout=RUN_TIMEOUT_S)
    assert hosts_of(fit, hosts) == {"sm_standardise": "a", "sm_centroids": "b"}
    assert ("sm_standardise", "sm_centroids", "a", "b", "s3") in crossings(fit, hosts)
    assert fit.states() == states
    # The states were made on a and b; c and a use them (read from S3, not from a cache).
    forward = submit_plan(
        seq(on("c", ex("sm_standardise")), on("a", ex("sm_centroids"))),
        input=X_NEW,
        states_from=fit.id,
        settings=mh_settings,
        require_workers=True,
    )
    assert forward.wait(timeout=RUN_TIMEOUT_S) == expected
    assert set(expected) == {"low", "high"}
    assert hosts_of(forward, hosts) == {"sm_standardise": "c", "sm_centroids": "a"}
    assert forward.states() == {}  # a forward run never fits


def test_cancel_stops_a_run_across_hosts_and_starts_nothing_new(
    mh_settings: Settings, hosts: HostWorkers
) -> None:
    run = submit_plan(
        seq(on("a", ex("rt_make")), on("b", ex("rt_sleep")), on("c", ex("rt_sum"))),
        params={"rt_sleep": {"s": 5}},
        settings=mh_settings,
        require_workers=True,
    )
    assert wait_for(lambda: run.status().nodes["rt_sleep"].state == "running", 20)
    assert run.cancel()
    with pytest.raises(RunCancelledError):
        run.wait(timeout=10)
    time.sleep(1.0)
    status = run.status()
    assert status.state == "cancelled"
    assert status.nodes["rt_make"].state == "done"
    assert status.nodes["rt_sum"].state == "cancelled"
    assert run._context.redis.hget(run._state.nodes, "rt_sum") is None  # never queued
    assert not run.cancel()
