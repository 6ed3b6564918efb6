"""Every plan variant across three hosts, its values crossing hosts, output checked."""

from __future__ import annotations

from typing import Any

import pytest

from somatize_tasks.config.settings import Settings
from somatize_tasks.runtime.producer.submit import submit_plan
from testkit.plans import COMPOSITE, MAKE_SUM, STREAM, ex, par, seq
from tests.multihost.fleet import HostWorkers
from tests.multihost.helpers import RUN_TIMEOUT_S, crossings, hosts_of, on

pytestmark = [pytest.mark.multihost, pytest.mark.slow]

MADE = [i * 0.5 for i in range(400)]  # rt_make's output: ~6 KB, through S3
MEAN = sum(MADE) / len(MADE)
STEP_TO_C = {
    "Step": {
        "node_id": "rt_route",
        "handoffs": [["double", on("c", ex("rt_double"))], ["negate", ex("rt_negate")]],
    }
}
BRANCH_ACROSS = {
    "Branch": {
        "node_id": "rt_label",
        "arms": [["big", on("c", ex("rt_double"))], ["small", on("a", ex("rt_negate"))]],
    }
}
LOOP_ACROSS = {
    "Loop": {
        "node_id": "count_up",
        "body": seq(on("a", ex("rt_add")), on("b", ex("rt_done"))),
        "max_iterations": 10,
        "until": {"type": "WhenSignaled", "node": "rt_done"},
        "carry_from": "rt_add",
    }
}

#: id -> (plan, input, ops, expected output, node -> host it must run on, S3 crossings)
CASES: dict[str, tuple[Any, Any, dict[str, str], Any, dict[str, str], set[tuple[str, str]]]] = {
    "sequence": (
        seq(on("a", ex("rt_make")), on("b", ex("rt_scale")), on("c", ex("rt_sum"))),
        None,
        {},
        2 * MAKE_SUM,
        {"rt_make": "a", "rt_scale": "b", "rt_sum": "c"},
        {("rt_make", "rt_scale"), ("rt_scale", "rt_sum")},
    ),
    "parallel": (
        seq(
            on("a", ex("rt_make")),
            par(on("b", seq(ex("rt_scale"), ex("rt_sum"))), on("c", ex("rt_sum_2"))),
            on("a", ex("rt_join")),
        ),
        None,
        {"rt_sum_2": "rt_sum"},
        {"keys": ["rt_sum", "rt_sum_2"], "total": 3 * MAKE_SUM},
        {"rt_make": "a", "rt_scale": "b", "rt_sum": "b", "rt_sum_2": "c", "rt_join": "a"},
        {("rt_make", "rt_scale"), ("rt_make", "rt_sum_2")},
    ),
    "execute": (on("c", ex("rt_size")), list(range(2000)), {}, 2000, {"rt_size": "c"}, set()),
    "step": (
        seq(on("a", ex("rt_add")), on("b", STEP_TO_C)),
        4,
        {},
        10,
        {"rt_add": "a", "rt_route": "b", "rt_double": "c"},
        set(),
    ),
    "loop": (LOOP_ACROSS, 0, {}, 5, {"rt_add": "a", "rt_done": "b"}, set()),
    "branch-big": (
        seq(on("a", ex("rt_add")), on("b", BRANCH_ACROSS)),
        19,
        {},
        40,
        {"rt_add": "a", "rt_label": "b", "rt_double": "c"},
        set(),
    ),
    "branch-small": (
        seq(on("c", ex("rt_add")), on("b", BRANCH_ACROSS)),
        2,
        {},
        -3,
        {"rt_add": "c", "rt_label": "b", "rt_negate": "a"},
        set(),
    ),
    "composite": (
        seq(on("a", ex("rt_make")), on("b", COMPOSITE)),
        None,
        {},
        [(v - MEAN) * 2 for v in MADE],
        {"rt_make": "a", "rt_mean_centre": "b", "rt_scale": "b"},
        {("rt_make", "rt_mean_centre")},
    ),
    "stream": (
        seq(on("a", ex("rt_make")), on("c", STREAM)),
        None,
        {},
        [(v + 2) * 2 for v in MADE],
        {"rt_make": "a", "rt_chunk_sum": "c", "rt_scale": "c"},
        {("rt_make", "rt_chunk_sum")},
    ),
    "empty": (
        seq(on("a", ex("rt_make")), "Empty", on("b", ex("rt_sum"))),
        None,
        {},
        MAKE_SUM,
        {"rt_make": "a", "rt_sum": "b"},
        {("rt_make", "rt_sum")},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_variant_runs_across_hosts(
    mh_settings: Settings, hosts: HostWorkers, case: str
) -> None:
    plan, given, ops, expected, placed, through_s3 = CASES[case]
    run = submit_plan(plan, input=given, ops=ops, settings=mh_settings, require_workers=True)
    assert run.wait(timeout=RUN_TIMEOUT_S) == expected
    ran_on = hosts_of(run, hosts)
    assert {n: ran_on[n] for n in placed} == placed
    moved = crossings(run, hosts)
    assert all(src != dst for _, _, src, dst, _ in moved), moved
    s3 = {(a, b) for a, b, _, _, how in moved if how == "s3"}
    assert s3 == through_s3, moved


def test_remote_by_tag_and_by_worker_id_land_on_their_hosts(
    mh_settings: Settings, hosts: HostWorkers
) -> None:
    target = hosts["c"].worker_id
    by_id = {
        "Remote": {"node_id": "rt_where", "target": {"WorkerId": target}, "plan": ex("rt_where")}
    }
    plan = seq(on("a", ex("rt_make")), on("b", ex("rt_sum")), by_id)
    run = submit_plan(plan, settings=mh_settings, require_workers=True)
    assert run.wait(timeout=RUN_TIMEOUT_S) == {"worker": target, "value": MAKE_SUM}
    assert hosts_of(run, hosts) == {"rt_make": "a", "rt_sum": "b", "rt_where": "c"}
