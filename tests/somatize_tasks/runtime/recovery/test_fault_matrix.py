"""The fault matrix (``python -m bench.faults``) runs a row end to end and judges it.

One cheap row, once, on its own real cluster (redis-server, moto, three
workers): the printed table has the issue's columns, the one run was
classified exactly once, and nothing the harness started is left running.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from testkit.faults.matrix import BY_KEY, COLUMNS, main
from testkit.faults.outcome import KINDS

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs a redis-server binary"),
]


def children() -> set[int]:
    """Pids of this process's living children (zombies are not alive)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[1]) == os.getpid() and fields[0] != "Z":
            found.add(int(stat.parent.name))
    return found


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.split(" | ")]


def test_one_row_runs_and_every_run_is_classified(capsys: pytest.CaptureFixture[str]) -> None:
    before = children()
    code = main(["--only", "kill1", "--reps", "1", "--timeout", "40"])
    out = capsys.readouterr().out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("fault ") and " | " in line)
    assert cells(lines[header]) == list(COLUMNS)
    assert set(lines[header + 1]) <= {"-", "+"}
    row = dict(zip(COLUMNS, cells(lines[header + 2]), strict=True))
    assert row["fault"] == BY_KEY["kill1"].title
    counts = {kind: int(row[kind]) for kind in KINDS}
    assert int(row["runs"]) == 1, out  # a run that missed its fault is not counted
    assert sum(counts.values()) == 1, out  # exactly one judgement
    assert row["verdict"] in ("ok", "FAIL")
    assert code == (0 if row["verdict"] == "ok" else 1)
    assert "load average" in out
    assert children() <= before, "the harness left processes running"


def test_an_unknown_row_is_refused_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--only", "kill1,nope"])
    assert "unknown rows nope" in capsys.readouterr().err
