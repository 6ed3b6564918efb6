"""How a node's output steers a plan: loop signals, arm selectors, handoffs.

These are Soma's rules (``soma-core/src/control.rs``), in one place, for
Python values: ``None`` is Soma's ``Empty``, a ``str`` its text, a bool, a
dict or a list its JSON. The rule throughout is Soma's: an unreadable
signal is an error, never a default, so a typo cannot silently run a loop
to its cap or take the first arm.

- A loop **stops** on ``True``, ``"done"``, ``"stop"``, ``{"done": True}``
  or ``None``; it **continues** on ``False``, ``"continue"`` or
  ``{"done": False}``; anything else (a number, an array, ``{"score": 1}``)
  carries no signal.
- A branch **selector** is a string label, a bool (as ``"true"`` /
  ``"false"``) or ``{"branch": "<label>"}``; a condition node that returns a
  :class:`Handoff` names the arm directly. When no arm has that label, an
  arm labelled ``default`` or ``else`` takes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from somatize_tasks.errors import ControlFlowError

Signal = Literal["stop", "continue"]
STOP: Signal = "stop"
CONTINUE: Signal = "continue"
DEFAULT_ARM_LABELS = ("default", "else")
_STOP_WORDS = frozenset({"done", "stop"})


def read_loop_signal(value: Any) -> Signal | None:
    """Soma's ``read_loop_signal``: stop, continue, or None (no signal at all)."""
    if value is None or value is True:
        return STOP
    if value is False:
        return CONTINUE
    if isinstance(value, str):
        if value in _STOP_WORDS:
            return STOP
        return CONTINUE if value == "continue" else None
    if isinstance(value, dict) and isinstance(value.get("done"), bool):
        return STOP if value["done"] else CONTINUE
    return None


def read_arm_selector(value: Any) -> str | None:
    """Soma's ``read_arm_selector``: the label a condition chose, or None."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("branch"), str):
        return str(value["branch"])
    return None


def is_default_arm(label: str) -> bool:
    return label in DEFAULT_ARM_LABELS


def choose_arm(node_id: str, selector: str, labels: list[str]) -> int:
    """The index of the arm ``selector`` picks: its label, else a default arm."""
    if selector in labels:
        return labels.index(selector)
    for index, label in enumerate(labels):
        if is_default_arm(label):
            return index
    raise ControlFlowError(
        f"branch '{node_id}' selected '{selector}', which matches no arm "
        f"({', '.join(labels)}) and there is no 'default' or 'else' arm"
    )


def branch_selector(node_id: str, output: Any) -> str:
    """What a Branch condition's output selects (a Handoff names its target)."""
    if isinstance(output, Handoff):
        return output.target
    selector = read_arm_selector(output)
    if selector is None:
        raise ControlFlowError(
            f"branch '{node_id}' condition returned {describe(output)}, which names no arm; "
            'return the arm\'s label as a string, a bool, or {"branch": "<label>"}'
        )
    return selector


def no_signal_message(loop_id: str, node_id: str, value: Any) -> str:
    """Why a loop cannot go on: its condition node's output says neither stop nor continue."""
    return (
        f"loop '{loop_id}': condition node '{node_id}' produced {describe(value)}, which "
        'carries no termination signal; return a bool, "done"/"stop"/"continue", '
        'None, or {"done": bool}'
    )


_MISSING: Any = object()


@dataclass(frozen=True)
class Handoff:
    """Returned by a ``Step`` (or a Branch condition) to hand control to ``target``.

    ``value`` is what the handoff plan receives; without it, the node's own
    input is handed on.
    """

    target: str
    value: Any = _MISSING

    @property
    def has_value(self) -> bool:
        return self.value is not _MISSING


def handoff_target(node_id: str, handoff: Handoff, declared: list[str]) -> str:
    """A Step may hand off only to a handoff it declares."""
    if handoff.target in declared:
        return handoff.target
    if not declared:
        raise ControlFlowError(
            f"step '{node_id}' handed off to '{handoff.target}', but it declares no handoffs"
        )
    raise ControlFlowError(
        f"step '{node_id}' handed off to '{handoff.target}', which is not among its "
        f"declared handoffs ({', '.join(declared)})"
    )


def describe(value: Any) -> str:
    """A short description of a value for an error message (never the whole value)."""
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"an array of shape {tuple(shape)}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
