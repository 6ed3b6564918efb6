"""The content cache on real workers sharing nothing but S3 and Redis.

Every node here logs each execution (``testkit.nodes.cache_nodes``), so a test
counts which nodes' code ran, and checks ``status`` counts the same.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest

from somatize_tasks.config.connections import redis_client
from somatize_tasks.config.keys import RedisKeys
from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import NodeFailedError
from somatize_tasks.observe.timeline import timeline_svg
from somatize_tasks.runtime.producer.handle import PlanRun
from somatize_tasks.runtime.producer.submit import submit_plan
from somatize_tasks.runtime.state.history import read_events
from testkit.nodes.cache_nodes import runs
from testkit.plans import ex, par, remote, seq
from testkit.workers import WorkerProcess
from tests.somatize_tasks.cli.test_cli_runs import cli

pytestmark = pytest.mark.slow
Workers = tuple[WorkerProcess, WorkerProcess]
# a -> b -> (c | d) -> total: a fork-join, each node logging its executions.
PLAN = seq(ex("a"), ex("b"), par(ex("c"), ex("d")), ex("total"))
OPS = {"a": "ck_add", "b": "ck_clip", "c": "ck_add", "d": "ck_add", "total": "ck_sum"}
NODES = ("a", "b", "c", "d", "total")


def params(log: Path, **changes: dict[str, Any]) -> dict[str, dict[str, Any]]:
    base = {n: {"log": str(log), "tag": n} for n in NODES}
    for node_id, change in changes.items():
        base[node_id].update(change)
    return base


def counts(log: Path) -> dict[str, int]:
    return {n: runs(log, n) for n in NODES}


def run(settings: Settings, plan: Any = PLAN, **kwargs: Any) -> PlanRun:
    kwargs.setdefault("ops", OPS)
    kwargs.setdefault("cache", "on")
    return submit_plan(plan, settings=settings, require_workers=True, **kwargs)


def cached_nodes(handle: PlanRun) -> set[str]:
    return {n for n, s in handle.status().nodes.items() if s.cached}


def test_a_plan_run_twice_runs_no_node_the_second_time(
    settings: Settings, two_workers: Workers, tmp_path: Path
) -> None:
    first = run(settings, input=1.0, params=params(tmp_path))
    output = first.wait(timeout=60)
    assert output == 6.0  # a: 2, b: 2, c: 3, d: 3, total: 6
    assert counts(tmp_path) == dict.fromkeys(NODES, 1)
    assert first.status().cached == 0
    second = run(settings, input=1.0, params=params(tmp_path))
    assert second.wait(timeout=60) == output
    assert counts(tmp_path) == dict.fromkeys(NODES, 1)  # no node's code ran again
    assert second.status().cached == len(NODES) == second.status().done
    shown = cli("status", second.id, settings=settings)
    assert shown.returncode == 0, shown.stderr
    assert "5/5 nodes (0 ran, 5 from the cache)" in shown.stdout
    listed = json.loads(cli("status", second.id, "--json", settings=settings).stdout)
    assert listed["progress"]["cached"] == 5
    assert all(n["cached"] and len(n["cache_key"]) == 64 for n in listed["nodes"].values())
    client, keys = redis_client(settings), RedisKeys(settings.key_prefix)
    drawn = timeline_svg(second.status(), history=read_events(client, keys, second.id))
    assert drawn.count('data-state="cached"') == len(NODES)  # each node's bar says so
    drawn = timeline_svg(first.status(), history=read_events(client, keys, first.id))
    assert 'data-state="cached"' not in drawn
    # A task's result, as its task-succeeded event carries it to Flower (and the log).
    logs = "".join(w.log() for w in two_workers)
    assert "succeeded in" in logs and ": 'cached: " in logs


def test_a_changed_node_reruns_with_what_depends_on_its_output_only(
    settings: Settings, two_workers: Workers, tmp_path: Path
) -> None:
    run(settings, input=1.0, params=params(tmp_path)).wait(timeout=60)
    changed = run(settings, input=1.0, params=params(tmp_path, c={"k": 10.0}))
    assert changed.wait(timeout=60) == 15.0  # c: 12
    assert counts(tmp_path) == {"a": 1, "b": 1, "c": 2, "d": 1, "total": 2}
    assert cached_nodes(changed) == {"a", "b", "d"}
    # Early cutoff: b's clip moves from 100 to 50, far above its input: b runs again,
    # its output is the same bytes, and nothing after it runs.
    cutoff = run(settings, input=1.0, params=params(tmp_path, b={"high": 50.0}))
    assert cutoff.wait(timeout=60) == 6.0
    assert counts(tmp_path) == {"a": 1, "b": 2, "c": 2, "d": 1, "total": 2}
    assert cached_nodes(cutoff) == {"a", "c", "d", "total"}


def test_a_run_that_failed_at_its_last_node_reruns_only_what_did_not_finish(
    settings: Settings, two_workers: Workers, tmp_path: Path
) -> None:
    plan = seq(ex("a"), ex("b"), ex("flaky"))
    ops = {"a": "ck_add", "b": "ck_add", "flaky": "ck_flaky"}
    given = {
        "a": {"log": str(tmp_path), "tag": "a"},
        "b": {"log": str(tmp_path), "tag": "b"},
        "flaky": {"log": str(tmp_path), "tag": "flaky", "marker": str(tmp_path / "marker")},
    }
    failed = run(settings, plan, ops=ops, input=0.0, params=given)
    with pytest.raises(NodeFailedError, match="first try"):
        failed.wait(timeout=60)
    again = run(settings, plan, ops=ops, input=0.0, params=given)
    assert again.wait(timeout=60) == 2.0
    assert [runs(tmp_path, n) for n in ("a", "b", "flaky")] == [1, 1, 2]
    status = again.status()
    assert (status.done, status.cached) == (3, 2)
    assert cached_nodes(again) == {"a", "b"}


def test_a_hit_is_taken_on_another_worker_than_the_one_that_computed_it(
    settings: Settings, two_workers: Workers, tmp_path: Path
) -> None:
    gpu, cpu = two_workers
    ops = {"a": "ck_big", "b": "ck_len"}
    given = {n: {"log": str(tmp_path), "tag": n} for n in ("a", "b")}
    on_gpu = run(settings, remote("gpu", seq(ex("a"), ex("b"))), ops=ops, params=given, input=1)
    assert on_gpu.wait(timeout=60) == sum(1.0 + i for i in range(2000))
    assert {s.worker for s in on_gpu.status().nodes.values()} == {gpu.worker_id}
    on_cpu = run(settings, remote("cpu", seq(ex("a"), ex("b"))), ops=ops, params=given, input=1)
    assert on_cpu.wait(timeout=60) == on_gpu.wait(timeout=5)
    assert {s.worker for s in on_cpu.status().nodes.values()} == {cpu.worker_id}
    assert cached_nodes(on_cpu) == {"a", "b"}
    assert (runs(tmp_path, "a"), runs(tmp_path, "b")) == (1, 1)
    assert len(on_cpu.result("a")) == 2000  # the value itself, read from the shared store


def _bucket(settings: Settings) -> Any:
    secret = settings.s3_secret_access_key
    return boto3.client(
        "s3",
        endpoint_url=settings.s3_endpoint_url,
        region_name=settings.s3_region,
        aws_access_key_id=settings.s3_access_key_id,
        aws_secret_access_key=secret.get_secret_value() if secret else None,
    )


def test_a_corrupt_or_missing_entry_is_a_miss_never_a_wrong_value(
    settings: Settings, two_workers: Workers, tmp_path: Path
) -> None:
    ops = {"a": "ck_big", "b": "ck_len"}
    given = {n: {"log": str(tmp_path), "tag": n} for n in ("a", "b")}
    plan = remote("gpu", seq(ex("a"), ex("b")))
    first = run(settings, plan, ops=ops, params=given, input=2)
    expected = first.wait(timeout=60)
    key = first.status().nodes["a"].cache_key
    assert key is not None
    client = _bucket(settings)
    record_key = f"{settings.s3_prefix}/__cache__/actions/{key[:2]}/{key}.json"
    record = json.loads(client.get_object(Bucket=settings.s3_bucket, Key=record_key)["Body"].read())
    value_key = f"{settings.s3_prefix}/__cache__/{record['hash']}/0"
    good = client.get_object(Bucket=settings.s3_bucket, Key=value_key)["Body"].read()
    bad = good.replace(b"2.0", b"9.0", 1)  # the same size, another value
    assert len(bad) == len(good) and bad != good
    client.put_object(Bucket=settings.s3_bucket, Key=value_key, Body=bad)
    # The worker's own copy is dropped too, as a lost disk would: the value comes from S3.
    for copy in Path(settings.cache_dir).glob(f"*/__cache__/{record['hash']}/0"):
        copy.write_bytes(bad)
    again = run(settings, plan, ops=ops, params=given, input=2)
    assert again.wait(timeout=60) == expected
    assert runs(tmp_path, "a") == 2  # the corrupt entry was a miss: a ran again
    assert cached_nodes(again) == {"b"}  # its recomputed output is the same: b hit
    healed = client.get_object(Bucket=settings.s3_bucket, Key=value_key)["Body"].read()
    assert healed == good  # the recomputation replaced the bad value
    client.delete_object(Bucket=settings.s3_bucket, Key=record_key)
    third = run(settings, plan, ops=ops, params=given, input=2)
    assert third.wait(timeout=60) == expected and runs(tmp_path, "a") == 3


def test_nondeterministic_nodes_seeds_and_cache_off_each_run_again(
    settings: Settings, two_workers: Workers, tmp_path: Path
) -> None:
    plan = seq(ex("a"), ex("n"))
    ops = {"a": "ck_add", "n": "ck_noisy"}
    given = {n: {"log": str(tmp_path), "tag": n} for n in ("a", "n")}
    for _ in range(2):
        run(settings, plan, ops=ops, params=given, input=1).wait(timeout=60)
    assert (runs(tmp_path, "a"), runs(tmp_path, "n")) == (1, 2)  # deterministic=False
    run(settings, plan, ops=ops, params=given, input=1, cache="off").wait(timeout=60)
    assert runs(tmp_path, "a") == 2  # a run with cache="off" uses nothing
    for seed in (1, 2, 1):
        run(settings, plan, ops=ops, params=given, input=1, seed=seed).wait(timeout=60)
    assert runs(tmp_path, "a") == 4  # seeds 1 and 2 each their own line; 1 again hits


def test_a_fit_caches_its_states_and_a_forward_with_them_its_outputs(
    settings: Settings, two_workers: Workers, tmp_path: Path
) -> None:
    plan = ex("s")
    ops = {"s": "ck_scale"}
    given = {"s": {"log": str(tmp_path), "tag": "s"}}
    fits = []
    for _ in (1, 2):  # one after the other: the second finds what the first kept
        fit = run(settings, plan, ops=ops, params=given, input=[2.0, 4.0], mode="fit")
        assert fit.wait(timeout=60) == [2 / 3, 4 / 3]
        assert fit.states() == {"s": 3.0}
        fits.append(fit)
    assert (runs(tmp_path, "s.fit"), runs(tmp_path, "s")) == (1, 1)
    forward = run(settings, plan, ops=ops, params=given, input=[3.0], states_from=fits[1].id)
    assert forward.wait(timeout=60) == [1.0]
    assert runs(tmp_path, "s.fit") == 1
