"""The fault matrix: every fault of issue 13, several times, on a real local cluster.

Each row starts a fresh cluster (``testkit.faults.cluster``: its own
redis-server, moto's S3 server, three real workers), runs its fault
``--reps`` times (dead workers are restarted between repetitions) and judges
every run (``testkit.faults.outcome``): **correct** (the right value),
**wrong** (a wrong value, or a forgery believed: the worst), **hung** (no end
within the row's bound), **clear error** (a project error naming the fault:
the right end only for rows that cannot finish), **other error** (anything
else). "workers lost" counts workers that died without the harness killing
them; "time to recover" runs from the fault to the run's end (correct or
clear error), median and max.

Usage: ``python -m bench.faults [--reps 3] [--only kill1,poison] [--timeout S]
[--budget S]``; ``--list`` names the rows. Ctrl-C stops everything it started.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

from somatize_tasks.local_cluster.processes import interrupts_raise
from testkit.faults.cluster import DST_SPARE, FaultCluster
from testkit.faults.outcome import CLEAR, CORRECT, HUNG, KINDS, MISSED, OTHER, WRONG, Outcome
from testkit.faults.rows import (
    Row,
    completion_window,
    final_output_lost,
    kill_workers,
    mid_download,
    mid_upload,
    pinned_dead,
    sigstop,
)
from testkit.faults.rows_infra import (
    disk_full,
    forged_node,
    forged_transfer_failed,
    malformed,
    poison,
    producer_killed,
    redis_restart,
    s3_paused,
    three_producers,
)
from testkit.faults.rows_state import (
    duplicate_id,
    long_loop,
    paused_returns,
    ram_and_cache_full,
    redis_paused_at_submit,
    replayed,
)

ROWS = [
    Row("kill1", "SIGKILL 1 of 3 workers mid-run", kill_workers(1), 60),
    Row("kill2", "SIGKILL 2 of 3 workers mid-run", kill_workers(2), 60),
    Row("sigstop", "SIGSTOP a worker 3 TTLs, then SIGCONT", sigstop, 60),
    Row("pinned", "node pinned to a SIGKILLed worker", pinned_dead, 40, may_fail=True),
    Row("upload", "SIGKILL mid-upload (24 MB, S3)", mid_upload, 60),
    Row("download", "SIGKILL mid-download (24 MB, S3)", mid_download, 60, tags=DST_SPARE),
    Row(
        "producer_before",
        "producer killed before submit_plan returns (400 branches)",
        producer_killed(before_return=True),
        60,
    ),
    Row(
        "producer_after",
        "producer killed after submit_plan returns (400 branches)",
        producer_killed(before_return=False),
        60,
    ),
    Row("completion", "SIGKILL just after a completion is recorded", completion_window, 60),
    Row(
        "final_output",
        "final output only on a worker SIGKILLed after the run",
        final_output_lost,
        30,
    ),
    Row(
        "redis_aof",
        "Redis SIGKILLed and restarted, AOF (fsync always)",
        redis_restart,
        60,
        aof=True,
    ),
    Row(
        "redis_nopersist",
        "Redis SIGKILLed and restarted, no persistence",
        redis_restart,
        40,
        may_fail=True,
    ),
    Row("s3_paused", "S3 down: moto SIGSTOPped 8 s, then SIGCONT", s3_paused, 60),
    Row(
        "disk_full",
        "disk full: 4 MB output, 2 MB tmpfs cache",
        disk_full,
        40,
        may_fail=True,
        tiny_disk_mb=2,
    ),
    Row("producers3", "30 runs from 3 producers, a worker SIGKILLed", three_producers, 90),
    Row("poison", "poison node (kills its worker; workers restarted)", poison, 60, may_fail=True),
    Row(
        "malformed", "malformed message on a busy worker's queue", malformed, 60, keeps_workers=True
    ),
    Row(
        "forged_node",
        'forged node message, input ["FORGED"], no key',
        forged_node,
        40,
        keeps_workers=True,
    ),
    Row(
        "forged_failed",
        "forged somatize.run.transfer_failed, no key",
        forged_transfer_failed,
        40,
        keeps_workers=True,
    ),
]
ROWS += [
    Row("fence", "SIGSTOP the worker of a random node until it ran elsewhere", paused_returns, 60),
    Row("replay", "signed node message replayed twice while it runs", replayed(2, False), 60),
    Row(
        "replay_redelivered",
        "the same, 3 copies flagged redelivered",
        replayed(3, True),
        60,
    ),
    Row("duplicate_id", "a second worker started under a busy worker's id", duplicate_id, 60),
    Row(
        "redis_paused_submit",
        "Redis SIGSTOPped at submit (6 s past a 3 s budget; 2 s within 10 s)",
        redis_paused_at_submit,
        60,
        may_fail=True,
    ),
    Row(
        "ram_cache_full",
        "full RAM and cache dirs: 3 MB NumPy output, 1 MB RAM dir, 2 MB cache",
        ram_and_cache_full,
        40,
        may_fail=True,
        tiny_disk_mb=2,
        tiny_ram_mb=1,
    ),
    Row("loop10k", "a 10,000-pass loop: right count, working state flat", long_loop(10_000), 300),
]
BY_KEY = {row.key: row for row in ROWS}
COLUMNS = ("fault", "runs", *KINDS, "workers lost", "time to recover", "verdict")


@dataclass
class RowResult:
    row: Row
    outcomes: list[Outcome] = field(default_factory=list)
    lost: int = 0
    note: str = ""

    def counts(self) -> Counter[str]:
        return Counter(o.kind for o in self.outcomes)

    @property
    def runs(self) -> int:
        """Runs whose fault was injected (a missed one is reported, not counted)."""
        return len(self.outcomes) - self.counts()[MISSED]

    def recover(self) -> str:
        times = [o.seconds for o in self.outcomes if o.kind in (CORRECT, CLEAR) and o.seconds]
        if not times:
            return "-"
        return f"{statistics.median(times):.1f} s (max {max(times):.1f})"

    def verdict(self) -> str:
        counts = self.counts()
        if not self.runs:
            return "not run"
        bad = counts[WRONG] + counts[HUNG] + counts[OTHER]
        if not self.row.may_fail:
            bad += counts[CLEAR]
        if self.row.keeps_workers:
            bad += self.lost
        return "ok" if bad == 0 else "FAIL"

    def cells(self) -> list[str]:
        counts = self.counts()
        return [
            self.row.title,
            str(self.runs),
            *(str(counts[k]) for k in KINDS),
            str(self.lost),
            self.recover(),
            self.verdict(),
        ]


def run_row(row: Row, reps: int, bound: float, deadline: float) -> RowResult:
    """``reps`` repetitions of ``row`` on a fresh cluster, stopped at ``deadline``."""
    result = RowResult(row)
    cluster = FaultCluster(
        aof=row.aof, tiny_disk_mb=row.tiny_disk_mb, tags=row.tags, tiny_ram_mb=row.tiny_ram_mb
    )
    try:
        try:
            cluster.start()
        except Exception as exc:
            result.note = f"cluster did not start: {exc}"
            return result
        for rep in range(reps):
            if time.monotonic() > deadline:
                result.note = f"out of time after {rep} repetitions"
                break
            started = time.monotonic()
            outcomes = row.fn(cluster, bound)
            result.outcomes += outcomes
            for outcome in outcomes:
                if len(outcomes) > 3 and outcome.kind == CORRECT:
                    continue  # many runs: only the ones that went wrong, then the counts
                mark = "" if outcome.kind == CORRECT else f"  {outcome.detail}"
                took = "-" if outcome.seconds is None else f"{outcome.seconds:.1f}s"
                print(f"  {row.key} #{rep}: {outcome.kind} ({took}){mark}", flush=True)
            kinds = Counter(o.kind for o in outcomes)
            print(
                f"  {row.key} #{rep}: {dict(kinds)} in {time.monotonic() - started:.0f} s",
                flush=True,
            )
            if not revive(cluster, result):
                break
        cluster.note_deaths()
        result.lost = len(cluster.lost)
        missed = result.counts()[MISSED]
        if missed:
            result.note = f"{missed} run(s) ended before the fault and are not counted"
    finally:
        cluster.close()
    return result


def revive(cluster: FaultCluster, result: RowResult) -> bool:
    """Restart dead workers for the next repetition. A worker that dies again at
    start (a message left on its queue kills it) is noted, its queue purged, and
    tried once more; False if the cluster cannot be made whole."""
    try:
        cluster.revive()
        return True
    except RuntimeError as exc:
        first = str(exc).splitlines()[0]
    purged = cluster.purge_dead_queues()
    result.note = (
        f"{first} at restart; purged the queue(s) of {', '.join(purged)}; " + result.note
    ).strip("; ")
    try:
        cluster.revive()
        return True
    except RuntimeError as exc:
        result.note += f"; still down: {str(exc).splitlines()[0]}"
        return False


def table(results: list[RowResult]) -> str:
    rows = [list(COLUMNS), *(r.cells() for r in results)]
    widths = [max(len(line[i]) for line in rows) for i in range(len(COLUMNS))]
    lines = [
        " | ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)) for line in rows
    ]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="repetitions of each fault")
    parser.add_argument("--only", default="", help="comma-separated row keys (see --list)")
    parser.add_argument(
        "--timeout",
        type=float,
        help="hung bound of every run, in seconds (default: each row's own)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=1500.0,
        help="stop starting repetitions after this many seconds in all",
    )
    parser.add_argument("--list", action="store_true", help="list the rows and exit")
    args = parser.parse_args(argv)
    if args.list:
        for row in ROWS:
            print(f"{row.key:16} {row.title} (bound {row.bound_s:.0f} s)")
        return 0
    keys = [k.strip() for k in args.only.split(",") if k.strip()] or list(BY_KEY)
    unknown = [k for k in keys if k not in BY_KEY]
    if unknown:
        parser.error(f"unknown rows {', '.join(unknown)}; --list names them")
    start = time.monotonic()
    print(
        f"fault matrix: {len(keys)} rows x {args.reps} reps, {os.cpu_count()} cores, {load()}",
        flush=True,
    )
    results = []
    with interrupts_raise():
        try:
            for key in keys:
                row = BY_KEY[key]
                bound = args.timeout or row.bound_s
                print(f"{row.key}: {row.title} (bound {bound:.0f} s)", flush=True)
                results.append(run_row(row, args.reps, bound, start + args.budget))
        except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP: all stopped by now
            print(f"\ninterrupted ({exc}); every process it started is stopped")
            return 130
        finally:
            print(f"\n{table(results)}\n")
            for result in results:
                if result.note:
                    print(f"{result.row.key}: {result.note}")
            print(f"{time.monotonic() - start:.0f} s in all, {load()}", flush=True)
    return 0 if all(r.verdict() == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
