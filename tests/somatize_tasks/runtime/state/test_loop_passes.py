"""Bounded runs: a loop forgets its passes one behind, and a run's budget and deadline
have defaults a deployment sets.

On real workers: a loop of 400 passes keeps its working state (``results``) at a
handful of fields from pass 100 on (before, about four more every pass), with a
loop nested in its body too, and computes what the local runner computes; a run
whose loops go past ``SOMATIZE_RUN_MAX_PASSES`` fails with ``RunBudgetError``
naming the loop; one submitted without a deadline gets ``SOMATIZE_RUN_DEADLINE_S``.
``bench/bench_loop_memory.py`` measures 10,000 passes.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import RunBudgetError, RunDeadlineError
from somatize_tasks.runtime.producer.handle import PlanRun
from somatize_tasks.runtime.producer.local import run_local
from somatize_tasks.runtime.producer.submit import submit_plan
from testkit.nodes import run_nodes  # noqa: F401  # the local runs below use its nodes
from testkit.plans import ex, seq
from testkit.workers import WorkerProcess

pytestmark = pytest.mark.slow
Workers = tuple[WorkerProcess, WorkerProcess]


def loop(node_id: str, body: dict[str, Any], passes: int, carry: str) -> dict[str, Any]:
    return {
        "Loop": {
            "node_id": node_id,
            "body": body,
            "max_iterations": passes,
            "until": {"type": "Exhaust"},
            "carry_from": carry,
        }
    }


def _fields(run: PlanRun) -> int:
    return int(run._state.client.hlen(run._state.results))


def _passes(run: PlanRun) -> int:
    return int(run._state.client.hget(run._state.results, "epochs") or 0)


def _follow(run: PlanRun) -> list[tuple[int, int]]:
    """(passes so far, fields of the working state), sampled until the run ends."""
    seen = []
    while run.status().state == "running":
        seen.append((_passes(run), _fields(run)))
        time.sleep(0.05)
    return seen


def test_a_long_loop_keeps_its_working_state_flat(settings: Settings, two_workers: Workers) -> None:
    plan = loop("spin", seq(ex("rt_add"), ex("rt_add_2")), 400, "rt_add_2")
    run = submit_plan(plan, input=0, settings=settings, require_workers=True)
    seen = _follow(run)
    assert run.wait(timeout=120) == 800.0
    later = [fields for passes, fields in seen if passes >= 100]
    assert later, f"no sample past pass 100: {seen[-5:]}"
    assert max(later) <= 20, f"the working state grew: {seen[::20]}"


def test_a_nested_loop_is_forgotten_with_the_pass_that_holds_it(
    settings: Settings, two_workers: Workers
) -> None:
    inner = loop("inner", seq(ex("rt_add")), 5, "rt_add")
    plan = loop("outer", seq(inner, ex("rt_add_2")), 60, "rt_add_2")
    expected = run_local(plan, input=0).output
    assert expected == 60 * 6.0
    run = submit_plan(plan, input=0, settings=settings, require_workers=True)
    seen = _follow(run)
    assert run.wait(timeout=120) == expected
    later = [fields for passes, fields in seen if passes >= 100]  # 6 passes per outer pass
    assert later and max(later) <= 40, f"the working state grew: {seen[::20]}"


def test_a_run_past_its_pass_budget_fails_naming_the_loop(
    settings: Settings, two_workers: Workers
) -> None:
    budgeted = settings.model_copy(update={"run_max_passes": 30})
    plan = loop("spin", seq(ex("rt_add")), 100, "rt_add")
    run = submit_plan(plan, input=0, settings=budgeted, require_workers=True)
    with pytest.raises(RunBudgetError) as caught:
        run.wait(timeout=60)
    message = str(caught.value)
    assert "loop 'spin' would start pass 31" in message and "SOMATIZE_RUN_MAX_PASSES" in message
    assert "\n" not in message
    # A run's own budget wins over the deployment's; the local runner keeps it too.
    assert submit_plan(plan, input=0, settings=budgeted, max_passes=100).wait(60) == 100.0
    local = run_local(plan, input=0, max_passes=30)
    assert local.status == "failed" and "pass 31" in str(local.error)


def test_a_run_without_a_deadline_gets_the_deployments(
    settings: Settings, two_workers: Workers
) -> None:
    bounded = settings.model_copy(update={"run_deadline_s": 2.0})
    run = submit_plan(
        seq(ex("rt_sleep"), ex("rt_add")),
        input=1,
        params={"rt_sleep": {"s": 30}},
        settings=bounded,
        require_workers=True,
    )
    with pytest.raises(RunDeadlineError, match="deadline of 2 s"):
        run.wait(timeout=60)
