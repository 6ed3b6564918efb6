"""A few thousand generated bad documents: only clean, small project errors.

Each case of :mod:`tests.somatize_tasks.runtime.compile.fuzz_docs` goes through the command
line's ``plan`` command in process (click's ``CliRunner``) and through the
checks ``submit_plan`` makes before it talks to Redis (``check_request``).
The command must print either a placement or one ``Error:`` message and exit
1, never a traceback; the submit checks must pass or raise the project's own
errors; every message stays under :data:`MAX_MESSAGE` characters however big
the input. The scheduler's own junk test (tests/scheduler/test_validation.py)
covers the plan model; this one covers what sits in front of it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from scheduler import SchedulerError
from somatize_tasks.catalog.entries import Catalog
from somatize_tasks.cli import main
from somatize_tasks.errors import SomatizeError
from somatize_tasks.runtime.producer.submit import check_request
from tests.somatize_tasks.runtime.compile.fuzz_docs import cases

#: No error message may be longer than this, whatever the input's size.
MAX_MESSAGE = 8_000


def _catalog() -> Catalog:
    catalog = Catalog("fuzz")
    catalog.register("scale", lambda x, k=1: x * k)
    catalog.register("shift", lambda x, by=0: x + by)
    return catalog


def _check_cli(runner: CliRunner, path: Path, name: str) -> str:
    result = runner.invoke(main, ["plan", str(path), "--json"])
    output = result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{name}: {type(result.exception).__name__}: {str(result.exception)[:300]}"
    )
    assert "Traceback" not in output, name
    assert len(output) < MAX_MESSAGE or result.exit_code == 0, (name, len(output))
    if result.exit_code == 0:
        return "placed"
    assert result.exit_code == 1, (name, result.exit_code, output[:300])
    assert output.startswith("Error: "), (name, output[:300])
    return "refused"


def _check_submit(request: dict[str, Any], catalog: Catalog, name: str) -> str:
    try:
        check_request(catalog=catalog, **request)
    except (SchedulerError, SomatizeError) as exc:
        assert 0 < len(str(exc)) < MAX_MESSAGE, (name, len(str(exc)))
        return "refused"
    return "accepted"


def test_generated_documents_give_only_clean_small_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    catalog = _catalog()
    path = tmp_path / "doc.json"
    seen: dict[str, int] = {}
    started = time.perf_counter()
    count = 0
    for name, text, request in cases():
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8", errors="surrogatepass")
        for outcome in (_check_cli(runner, path, name), _check_submit(request, catalog, name)):
            seen[outcome] = seen.get(outcome, 0) + 1
        count += 1
    took = time.perf_counter() - started
    assert count >= 2_500
    # A fuzz that refuses everything (or nothing) tests nothing.
    assert seen.get("placed", 0) > 50 and seen.get("accepted", 0) > 50, seen
    assert seen.get("refused", 0) > 1_000, seen
    print(f"{count} documents, {seen}, {took:.1f} s")


@pytest.mark.parametrize("levels", [129, 100_000])
def test_deep_nesting_names_the_limit_and_where(tmp_path: Path, levels: int) -> None:
    path = tmp_path / "deep.json"
    path.write_text('{"plan": ' + "[" * levels + "]" * levels + "}")
    result = CliRunner().invoke(main, ["plan", str(path)])
    assert result.exit_code == 1 and result.exception is not None
    assert "more than 128 levels deep (at line 1, column 137)" in result.output
    with pytest.raises(SchedulerError, match=r"more than 128 levels deep \(at \[0\]\[0\]"):
        check_request({"plan": _nested(levels)})


def _nested(levels: int) -> Any:
    value: Any = []
    for _ in range(levels):
        value = [value]
    return value


def test_bad_params_name_the_node_and_the_parameter(tmp_path: Path) -> None:
    plan = {"Sequence": [{"Execute": {"node_id": "scale_1"}}, {"Execute": {"node_id": "shift"}}]}
    with pytest.raises(SomatizeError, match=r"node 'scale_1': .*\['bogus'\].*it takes: k"):
        check_request(plan, params={"scale_1": {"bogus": 1}}, catalog=_catalog())
    with pytest.raises(SomatizeError, match=r"params for node 'shift' must be an object"):
        check_request(plan, params={"shift": 5}, catalog=_catalog())
    plan_file, params_file = tmp_path / "plan.json", tmp_path / "params.json"
    plan_file.write_text('{"Execute": {"node_id": "normalize"}}')
    params_file.write_text('{"normalize": {"n": 5}}')
    result = CliRunner().invoke(
        main,
        [
            "run",
            str(plan_file),
            "--params",
            str(params_file),
            "--nodes",
            "somatize_tasks.examples.nodes",
        ],
    )
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert result.output.startswith("Error: node 'normalize': ") and "['n']" in result.output
    assert "it takes: pause_s" in result.output
