"""Property-based tests: random plans and worker sets, every invariant on every output."""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import (
    DistributionPlan,
    ExecutionPlan,
    PlacementError,
    data_edges,
    exit_nodes,
    load_workers,
    plan_warnings,
    schedule,
    schedule_study,
)
from tests.scheduler import reference
from tests.scheduler.strategies import plans, worker_sets


def plan_of(wire: Any) -> ExecutionPlan:
    return ExecutionPlan.model_validate(wire)


FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _usable(workers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [w for w in workers if reference.free_slots(w) > 0]


def _unplaceable(wire: Any, workers: list[dict[str, Any]]) -> bool:
    """Whether some Remote target no usable worker satisfies."""
    usable = _usable(workers)
    return any(not any(reference.satisfies(w, t) for w in usable) for t in _remote_targets(wire))


def _remote_targets(wire: Any) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []

    def walk(node: Any) -> None:
        kind, body = reference.variant(node)
        if kind == "Remote":
            found.append(next(iter(body["target"].items())))
        for child in reference.children(node):
            walk(child)

    walk(wire)
    return found


def _check_common(wire: Any, workers: list[dict[str, Any]], out: DistributionPlan) -> None:
    ids = list(reference.all_ids(wire))
    by_id = {w["id"]: w for w in workers}
    placed = {a.node_id: a.worker_id for a in out.assignments}

    # Every node id assigned exactly once, in execution order, on a usable worker.
    assert [a.node_id for a in out.assignments] == ids
    for a in out.assignments:
        assert reference.free_slots(by_id[a.worker_id]) > 0
        assert a.worker_name == by_id[a.worker_id]["name"]
        assert a.reason

    # Each node in exactly one phase; phases numbered 0..n-1 in execution order.
    assert [p.phase_index for p in out.phases] == list(range(len(out.phases)))
    assert [n for p in out.phases for n in p.node_ids] == ids
    phase_of = {n: p for p in out.phases for n in p.node_ids}
    for a in out.assignments:
        phase = phase_of[a.node_id]
        assert a.phase == phase.phase_type
        if phase.phase_type.kind == "sequential":
            assert phase.worker_ids == [a.worker_id]

    # Remote targets honoured, for everything inside the Remote.
    for node_id, target in reference.required_targets(wire).items():
        assert reference.satisfies(by_id[placed[node_id]], target), (node_id, target)

    # Exactly one transfer per cross-worker data edge, none within a worker.
    edges = reference.data_edges(wire)
    assert sorted(data_edges(plan_of(wire))) == sorted(edges)
    expected = {(s, t, placed[s], placed[t]) for s, t in edges if placed[s] != placed[t]}
    got = [(d.from_node, d.to_node, d.from_worker, d.to_worker) for d in out.data_transfers]
    assert Counter(got) == Counter(expected)

    # The output survives its own JSON.
    again = DistributionPlan.load(out.model_dump_json())
    assert again.model_dump(mode="json") == out.model_dump(mode="json")


def _check_slots(wire: Any, workers: list[dict[str, Any]], out: DistributionPlan) -> None:
    """In one parallel phase no worker gets more branches than its free slots while
    another worker eligible for the branch still had free ones."""
    usable = _usable(workers)
    by_id = {w["id"]: w for w in usable}
    sites = [s for s in reference.outermost_parallels(wire) if s.has_nodes]
    parallel_phases = [p for p in out.phases if p.phase_type.kind == "parallel"]
    assert len(sites) == len(parallel_phases)
    for site, phase in zip(sites, parallel_phases, strict=True):
        assert len(phase.worker_ids) == len(site.branch_targets)
        held = Counter(phase.worker_ids)
        for worker_id, target in zip(phase.worker_ids, site.branch_targets, strict=True):
            assert reference.satisfies(by_id[worker_id], target)
            if held[worker_id] <= reference.free_slots(by_id[worker_id]):
                continue
            eligible = [w for w in usable if reference.satisfies(w, target)]
            assert all(held[w["id"]] >= reference.free_slots(w) for w in eligible), (
                worker_id,
                held,
            )
        if any(held[w] > reference.free_slots(by_id[w]) for w in held):
            assert any("outnumber the free slots" in w for w in out.warnings)


@FAST
@given(wire=plans, workers=worker_sets(min_size=1), data=st.data())
def test_schedule_invariants(wire: Any, workers: list[dict[str, Any]], data: st.DataObject) -> None:
    plan = ExecutionPlan.model_validate(wire)
    ids = plan.node_ids()
    differentiable = data.draw(st.lists(st.sampled_from(ids), unique=True) if ids else st.just([]))
    infos = load_workers(workers)
    if not _usable(workers):
        out = schedule(plan, infos, differentiable)
        assert out.assignments == [] and out.phases == []
        assert out.warnings[1:] == plan_warnings(plan)
        return
    try:
        out = schedule(plan, infos, differentiable)
    except PlacementError as exc:
        assert _unplaceable(wire, workers), str(exc)
        assert str(exc).startswith(f"0/{len(workers)} workers can take ")
        fallback = schedule(plan, infos, differentiable, allow_local_fallback=True)
        assert fallback.assignments == [] and fallback.warnings
        return
    assert not _unplaceable(wire, workers)
    _check_common(wire, workers, out)
    if not differentiable:
        _check_slots(wire, workers, out)

    # Deterministic: the same input (in any worker order) gives the same output.
    shuffled = list(infos)
    random.Random(len(ids)).shuffle(shuffled)
    again = schedule(ExecutionPlan.model_validate(wire), shuffled, list(differentiable))
    assert again.model_dump(mode="json") == out.model_dump(mode="json")


@FAST
@given(wire=plans, workers=worker_sets(min_size=1), trials=st.integers(0, 5))
def test_study_invariants(wire: Any, workers: list[dict[str, Any]], trials: int) -> None:
    plan = ExecutionPlan.model_validate(wire)
    infos = load_workers(workers)
    usable = sorted(_usable(workers), key=lambda w: w["id"])
    if not usable:
        assert schedule_study(plan, infos, trials).warnings
        return
    # A Remote no usable worker can take still fails, trial or not.
    unplaceable = _unplaceable(wire, workers)
    try:
        out = schedule_study(plan, infos, trials)
    except PlacementError:
        assert unplaceable and trials > 0
        return
    assert not unplaceable or trials == 0
    ids = plan.node_ids()
    assert [a.node_id for a in out.assignments] == ids * trials
    targets = reference.required_targets(wire)
    by_id = {w["id"]: w for w in usable}
    for index in range(trials):
        rows = out.assignments[index * len(ids) : (index + 1) * len(ids)]
        home = usable[index % len(usable)]["id"]
        for row in rows:
            assert row.phase.kind == "trial"
            assert (row.phase.trial_index, row.phase.total) == (index, trials)
            if row.node_id in targets:
                assert reference.satisfies(by_id[row.worker_id], targets[row.node_id])
            else:
                assert row.worker_id == home, row
    for phase in out.phases:
        # A trial's phase names its round-robin worker first, then any other it uses.
        rows = [a for a in out.assignments if a.phase == phase.phase_type]
        assert [a.node_id for a in rows] == phase.node_ids
        assert {a.worker_id for a in rows} <= set(phase.worker_ids)
        home = usable[phase.phase_type.trial_index % len(usable)]["id"]
        assert phase.worker_ids[0] == home
    with_nodes = [p for p in out.phases if p.node_ids]
    assert [p.phase_index for p in out.phases] == list(range(len(out.phases)))
    assert len(with_nodes) == (trials if ids else 0)
    json.loads(out.model_dump_json())


def _naive_branch_workers(workers: list[dict[str, Any]], branches: int) -> list[str]:
    """The spec, one pick at a time: spread (fewest held), then most free slots, then
    no GPU, more cores, id; all full: smallest (overflow + 1) / capacity, then id."""
    usable = _usable(workers)
    free = {w["id"]: reference.free_slots(w) for w in usable}
    capacity = dict(free)
    held = dict.fromkeys(free, 0)
    overflow = dict.fromkeys(free, 0)
    picks = []
    for _ in range(branches):
        open_ = [w for w in usable if free[w["id"]] > 0]
        if open_:
            best = min(
                open_,
                key=lambda w: (held[w["id"]], -free[w["id"]], w["gpu"], -w["cpu_cores"], w["id"]),
            )
            held[best["id"]] += 1
            free[best["id"]] -= 1
        else:
            best = min(usable, key=lambda w: ((overflow[w["id"]] + 1) / capacity[w["id"]], w["id"]))
            overflow[best["id"]] += 1
        picks.append(best["id"])
    return picks


@FAST
@given(workers=worker_sets(min_size=1), branches=st.integers(1, 60))
def test_branch_choice_matches_the_naive_rule(workers: list[dict[str, Any]], branches: int) -> None:
    if not _usable(workers):
        return
    wire = {"Parallel": [{"Execute": {"node_id": f"b{i}"}} for i in range(branches)]}
    out = schedule(ExecutionPlan.model_validate(wire), load_workers(workers))
    assert out.phases[0].worker_ids == _naive_branch_workers(workers, branches)


@FAST
@given(wire=plans)
def test_exit_nodes_match_the_reference_model(wire: Any) -> None:
    assert set(exit_nodes(plan_of(wire))) == set(reference.exit_nodes(wire))
