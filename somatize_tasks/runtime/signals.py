"""Reading what a node says about control flow: loop signals and branch labels.

The words are DESIGN.md's: a loop stops on ``True``, ``"done"``, ``"stop"``,
``{"done": True}`` or ``None``, goes on on ``False`` or ``{"done": False}``;
anything else is an error, never a silent run to the iteration cap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from somatize_tasks.errors import SomatizeError

STOP_WORDS = frozenset({"done", "stop"})


class ControlFlowError(SomatizeError, ValueError):
    """A node's output cannot steer the plan the way its place in it needs."""


def loop_should_stop(node_id: str, value: Any) -> bool:
    """Whether ``value``, the output of signal node ``node_id``, says stop."""
    if value is None or value is True:
        return True
    if value is False:
        return False
    if isinstance(value, str) and value in STOP_WORDS:
        return True
    if isinstance(value, dict) and isinstance(value.get("done"), bool):
        return bool(value["done"])
    raise ControlFlowError(
        f"node '{node_id}' signals a loop but returned {_short(value)}; "
        'stop with True, "done", "stop", {"done": True} or None, '
        'continue with False or {"done": False}'
    )


def branch_label(node_id: str, value: Any, labels: list[str]) -> str:
    """The arm label a Branch condition chose; an unknown one names the choices."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ControlFlowError(
            f"branch '{node_id}' must return one of its labels "
            f"({', '.join(map(repr, labels))}), not {_short(value)}"
        )
    label = str(value)
    if label not in labels:
        raise ControlFlowError(
            f"branch '{node_id}' chose '{label}', which is not one of its labels: "
            f"{', '.join(map(repr, labels))}"
        )
    return label


_MISSING: Any = object()


@dataclass(frozen=True)
class Handoff:
    """Returned by a ``Step`` node to hand control to one of its declared handoffs.

    ``value`` is what the handoff plan receives; without it, the step's own
    input is handed on.
    """

    target: str
    value: Any = _MISSING

    @property
    def has_value(self) -> bool:
        return self.value is not _MISSING


def handoff_target(node_id: str, handoff: Handoff, declared: list[str]) -> str:
    if handoff.target not in declared:
        choices = ", ".join(map(repr, declared)) or "none"
        raise ControlFlowError(
            f"step '{node_id}' handed off to '{handoff.target}', which it does not declare; "
            f"declared handoffs: {choices}"
        )
    return handoff.target


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
