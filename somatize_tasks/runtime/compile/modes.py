"""Fit or forward: which a run is, and what each needs (Soma's ``RunMode``).

A fit (``mode="fit"``, labels ``y`` optional) has every trainable Filter
learn its state from its input, forward with it, and keeps the states. A
forward (``mode="forward"``) uses states a fit learned and never fits. By
default a run given states forwards, and so does a plan with a Stream
(which cannot fit); any other run fits, so a plan of plain functions needs
no mode at all.
"""

from __future__ import annotations

from scheduler import ExecutionPlan, Stream
from somatize_tasks.errors import RunModeError
from somatize_tasks.runtime.compile.program import FIT, FORWARD

MODES = (FIT, FORWARD)


def run_mode(plan: ExecutionPlan, mode: str | None, has_states: bool, has_labels: bool) -> str:
    """The mode a run takes; an error names the argument that does not fit."""
    if mode is None:
        mode = FORWARD if has_states or (_streams(plan) and not has_labels) else FIT
    if mode not in MODES:
        raise RunModeError(f"mode must be 'fit' or 'forward', not {mode!r}")
    if mode == FORWARD and has_labels:
        raise RunModeError("labels (y) are only used when fitting; a forward run takes none")
    if mode == FIT and has_states:
        raise RunModeError(
            "a fit learns its states; states_from is for forward runs (mode='forward')"
        )
    check_run_mode(plan, mode)
    return mode


def check_run_mode(plan: ExecutionPlan, mode: str) -> None:
    """A Stream cannot run in a fit, as in Soma: say so before anything runs."""
    if mode != FIT:
        return
    for node in _streams(plan):
        raise RunModeError(
            f"stream '{node.node_ids_[0]}' cannot run in a fit (as in Soma): fit the "
            "plan first, then run it with mode='forward' and its states "
            "(CLI: --mode forward --states-from RUN_ID)"
        )


def _streams(plan: ExecutionPlan) -> list[Stream]:
    found, stack = [], [plan.root]
    while stack:
        node = stack.pop()
        if isinstance(node, Stream):
            found.append(node)
        stack.extend(node.children())
    return found
