"""Study parts without workers: spaces, specs, records, replay, the CLI's options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from somatize_tasks.catalog.trial import NodeContext, current_seed, current_trial, report, running
from somatize_tasks.cli.study import parse_pruner
from somatize_tasks.errors import StudyError
from somatize_tasks.study.api import _pruning, _same_study, _spec
from somatize_tasks.study.record import MetricPoint, StudyRecord, TrialRecord
from somatize_tasks.study.sampling import grid_size, new_study, replay
from somatize_tasks.study.space import load_space, run_params
from tests.somatize_tasks.cli.test_cli_runs import cli

NODES = ["train", "score"]
SPACE = [
    {"type": "float", "name": "train.lr", "low": 0.001, "high": 0.1, "scale": "log"},
    {"type": "int", "name": "train.depth", "low": 2, "high": 6, "step": 2},
    {"type": "categorical", "name": "train.kernel", "choices": ["rbf", "linear"]},
]


@pytest.mark.parametrize(
    ("space", "words"),
    [
        ([], "non-empty list"),
        ([{"type": "float", "name": "train.lr", "low": 1}], "space[0]: Value error, a float"),
        ([{"type": "float", "name": "lr", "low": 0, "high": 1}], "space[0].name"),
        ([{"type": "float", "name": "x.lr", "low": 0, "high": 1}], "not a node of the plan"),
        ([{"type": "float", "name": "train.lr", "low": 0, "high": 1, "scale": "log"}], "log"),
        ([{"type": "int", "name": "train.n", "low": 0.5, "high": 3}], "whole"),
        ([{"type": "categorical", "name": "train.k", "choices": []}], "choices"),
        ([{"type": "vector", "name": "train.k"}], "space[0].type"),
        ([SPACE[0], SPACE[0]], "appears twice"),
    ],
)
def test_a_bad_space_is_refused_naming_the_dimension_and_field(space: Any, words: str) -> None:
    with pytest.raises(StudyError) as caught:
        load_space(space, NODES)
    assert words in str(caught.value)


def test_a_point_becomes_run_params_over_the_fixed_ones() -> None:
    dims = load_space({"space": SPACE}, NODES)
    assert [d.node for d in dims] == ["train"] * 3
    sampled = {"train.lr": 0.01, "train.kernel": "rbf"}
    fixed = {"train": {"epochs": 3}, "score": {"k": 1}}
    assert run_params(sampled, fixed) == {
        "train": {"epochs": 3, "lr": 0.01, "kernel": "rbf"},
        "score": {"k": 1},
    }
    assert dims[1].grid(5) == [2, 3, 4, 5, 6] and dims[0].grid(3) == pytest.approx(
        [0.001, 0.01, 0.1]
    )


def _spec_of(**changes: Any) -> Any:
    given: dict[str, Any] = {
        "space": SPACE,
        "n_trials": 8,
        "objective": "score",
        "direction": "minimize",
        "strategy": "bayesian",
        "pruning": None,
        "seeds": (),
        "seed": 1,
        "cache": True,
        "name": "t",
    }
    given.update(changes)
    return _spec(NODES, **given)


def test_a_spec_names_what_is_missing_or_wrong() -> None:
    with pytest.raises(StudyError, match="objective 'nope' names no node"):
        _spec_of(objective="nope")
    with pytest.raises(StudyError, match="needs an objective"):
        _spec_of(objective=None)
    with pytest.raises(StudyError, match="direction"):
        _spec_of(direction="up")
    with pytest.raises(StudyError, match="seeds"):
        _spec_of(seeds=[1, 1])
    spec = _spec_of(objective="train.loss", seeds=[1, 2, 3])
    assert (spec.objective_node, spec.objective_metric, spec.total) == ("train", "loss", 24)
    grid = _spec_of(strategy="grid", n_trials=1000, grid_points=3)
    assert grid.n_trials == grid_size(grid) == 3 * 3 * 2  # capped at the whole grid


def test_pruning_in_somas_forms_and_on_the_command_line() -> None:
    assert _pruning(("median", 2)).warmup == 2  # type: ignore[union-attr]
    found = _pruning(("percentile", 25.0, 1))
    assert found is not None and (found.percentile, found.warmup) == (25.0, 1)
    assert parse_pruner("median:2:3") == {"type": "median", "warmup": 2, "startup": 3}
    assert parse_pruner("percentile:25") == {"type": "percentile", "percentile": 25.0}
    for bad in ("mean", "median:x", "percentile"):
        with pytest.raises(StudyError, match="--pruner"):
            parse_pruner(bad)
    with pytest.raises(StudyError, match="median"):
        _pruning(("quantile", 3))


def test_a_record_round_trips_replays_and_names_its_best(tmp_path: Path) -> None:
    spec = _spec_of(objective="train.loss", direction="maximize")
    record = StudyRecord(spec=spec, plan={"Execute": {"node_id": "train"}})
    point = {"train.lr": 0.01, "train.depth": 4, "train.kernel": "rbf"}
    series = [
        MetricPoint(name="loss", value=v, step=s, node_id="train") for s, v in enumerate([3, 2])
    ]
    record.trials = [
        TrialRecord(number=0, params=point, state="completed", value=0.5, series=series),
        TrialRecord(number=1, params=point, state="completed", value=0.9, finished_at=1e9),
        TrialRecord(number=2, params=point, state="pruned", pruned_step=1, series=series),
        TrialRecord(number=3, params=point, state="failed", error="boom"),
        TrialRecord(number=4, params=point, state="running", run_id="r"),
    ]
    record.save(tmp_path / "s.json")
    loaded = StudyRecord.load(tmp_path / "s.json")
    assert loaded == record and loaded.finished() == 4
    best = loaded.best()
    assert best is not None and best.number == 1  # maximize
    study = new_study(spec)
    replay(study, loaded)
    states = [t.state for t in study.trials]
    assert states == [
        optuna.trial.TrialState.COMPLETE,
        optuna.trial.TrialState.COMPLETE,
        optuna.trial.TrialState.PRUNED,
        optuna.trial.TrialState.FAIL,
    ]
    assert study.trials[0].intermediate_values == {0: 3.0, 1: 2.0}
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(StudyError, match="cannot be read"):
        StudyRecord.load(tmp_path / "bad.json")
    with pytest.raises(StudyError, match="nothing to resume"):
        StudyRecord.load(tmp_path / "none.json")


def test_node_code_reads_its_seed_and_trial_and_reports_outside_a_study() -> None:
    assert (current_seed(), current_trial(), report("loss", 1.0, 0)) == (None, None, False)
    seen: list[tuple[str, str, float, int]] = []

    def reporter(node_id: str, name: str, value: float, step: int) -> bool:
        seen.append((node_id, name, value, step))
        return step >= 1

    trial = {"study": "s", "number": 3, "params": {}, "seed": 7}
    with running(NodeContext("r", "train", 7, trial, reporter)):
        assert current_seed() == 7 and current_trial() == trial
        assert report("loss", 0.5, 0) is False and report("loss", 0.4, 1) is True
    assert seen == [("train", "loss", 0.5, 0), ("train", "loss", 0.4, 1)]
    assert current_seed() is None


def test_the_study_command_says_what_a_new_study_needs(tmp_path: Path) -> None:
    (tmp_path / "plan.json").write_text('{"Execute": {"node_id": "train"}}')
    done = cli("study", str(tmp_path / "plan.json"), "--trials", "3")
    assert done.returncode == 2 and "needs --space, --trials and --objective" in done.stderr
    resumed = cli("study", str(tmp_path / "plan.json"), "--resume", "--record", str(tmp_path / "r"))
    assert resumed.returncode == 1 and "nothing to resume" in resumed.stderr


def test_a_resume_refuses_a_study_other_than_its_records() -> None:
    spec = _spec_of()
    _same_study(spec, None, None, None, NODES)  # nothing given: the record's study
    _same_study(spec, SPACE, 8, "score", NODES)  # the same, given again
    with pytest.raises(StudyError, match=r"another study \(n_trials, objective differ\)"):
        _same_study(spec, SPACE, 9, "train", NODES)
