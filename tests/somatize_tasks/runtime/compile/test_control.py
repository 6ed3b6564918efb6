"""Soma's control readers (``soma-core/src/control.rs``), with its test vectors.

Python values stand for Soma's: ``None`` is ``Empty``, a str is text or a
JSON string, a NumPy array is a tensor.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from somatize_tasks.errors import ControlFlowError
from somatize_tasks.runtime.compile.control import (
    Handoff,
    branch_selector,
    choose_arm,
    is_default_arm,
    read_arm_selector,
    read_loop_signal,
)


@pytest.mark.parametrize("value", [None, True, "done", "stop", {"done": True}])
def test_stop_signals(value: Any) -> None:
    assert read_loop_signal(value) == "stop"


@pytest.mark.parametrize("value", [False, {"done": False}, "continue"])
def test_continue_signals(value: Any) -> None:
    assert read_loop_signal(value) == "continue"


@pytest.mark.parametrize(
    "value", [np.array([1.0]), 42, 1, 0, 0.5, {"score": 0.9}, {"done": "yes"}, "again", [True]]
)
def test_tensors_numbers_and_other_values_are_not_signals(value: Any) -> None:
    assert read_loop_signal(value) is None


def test_arm_selectors() -> None:
    assert read_arm_selector("billing") == "billing"
    assert read_arm_selector(True) == "true"
    assert read_arm_selector(False) == "false"
    assert read_arm_selector({"branch": "retry"}) == "retry"
    assert read_arm_selector("tech") == "tech"


@pytest.mark.parametrize("value", [np.array([1.0]), None, {"score": 1}, 3, {"branch": 1}])
def test_unusable_selectors_are_none(value: Any) -> None:
    assert read_arm_selector(value) is None


def test_default_arm_labels() -> None:
    assert is_default_arm("default") and is_default_arm("else")
    assert not is_default_arm("billing")


def test_no_matching_label_falls_back_to_default_or_else() -> None:
    assert choose_arm("b", "tech", ["billing", "tech"]) == 1
    assert choose_arm("b", "other", ["billing", "default"]) == 1
    assert choose_arm("b", "other", ["else", "billing"]) == 0
    with pytest.raises(ControlFlowError, match=r"selected 'other'.*\(billing, tech\)"):
        choose_arm("b", "other", ["billing", "tech"])


def test_a_handoff_names_the_arm_directly_and_an_unusable_value_is_named() -> None:
    assert branch_selector("b", Handoff("tech", 1)) == "tech"
    with pytest.raises(ControlFlowError, match="branch 'b' condition returned 3"):
        branch_selector("b", 3)
