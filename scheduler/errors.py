"""Errors raised by the scheduler package.

    SchedulerError                 root: catch this to catch everything below
    ├── PlanValidationError        a plan, worker list or distribution failed to load
    └── PlacementError             a node's requirements cannot be met by any live worker

Both are also ``ValueError``s, so code that already treats bad input as a
``ValueError`` keeps working.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: An error lists at most this many problems (or names); the rest are counted.
MAX_LISTED = 20
#: One listed problem is cut to at most this many characters.
MAX_LINE_CHARS = 300


def shorten(text: str, most: int = MAX_LINE_CHARS) -> str:
    """``text`` cut to ``most`` characters, marked with an ellipsis when cut."""
    return text if len(text) <= most else text[: most - 1] + "…"


def listing(
    items: Iterable[object],
    most: int = MAX_LISTED,
    sep: str = ", ",
    item_chars: int = MAX_LINE_CHARS,
) -> str:
    """The first ``most`` items (each cut to ``item_chars``) joined with ``sep``, then
    "… and K more": a list in an error message stays small however long the input."""
    shown: list[str] = []
    extra = 0
    for item in items:
        if len(shown) < most:
            shown.append(shorten(str(item), item_chars))
        else:
            extra += 1
    more = f"{sep}… and {extra} more" if extra else ""
    return sep.join(shown) + more


class SchedulerError(Exception):
    """Root of every error the scheduler raises on purpose."""


@dataclass(frozen=True)
class FieldProblem:
    """One thing wrong with the input: where (a readable path) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class PlanValidationError(SchedulerError, ValueError):
    """The input does not describe a valid plan (or worker list, or distribution).

    ``problems`` lists every problem found, each with the path to the bad
    field in the JSON document (``Sequence[2].Parallel[0].Execute.node_id``).
    The message lists the first :data:`MAX_LISTED` of them, each cut to
    :data:`MAX_LINE_CHARS`, and counts the rest: it stays small however bad
    the input.
    """

    def __init__(self, what: str, problems: Sequence[FieldProblem]) -> None:
        self.what = what
        self.problems = list(problems)
        lines = "\n".join(f"  - {shorten(str(p))}" for p in self.problems[:MAX_LISTED])
        if len(self.problems) > MAX_LISTED:
            lines += f"\n  … and {len(self.problems) - MAX_LISTED} more"
        count = len(self.problems)
        noun = "problem" if count == 1 else "problems"
        super().__init__(f"invalid {what} ({count} {noun}):\n{lines}")


#: The rejection reason of a worker that satisfies a target but has no free slot.
AT_CAPACITY = "at capacity"


class PlacementError(SchedulerError, ValueError):
    """No live worker can take a node whose target is fixed (a ``Remote``).

    ``node_id`` and ``target`` say what could not be placed; ``rejections``
    maps each reason ("lack tag 'gpu'", "at capacity") to how many workers
    it excluded, so a caller can tell "never fits" from "not now".
    """

    def __init__(self, node_id: str, target: str, rejections: dict[str, int], total: int) -> None:
        self.node_id = node_id
        self.target = target
        self.rejections = dict(rejections)
        self.total_workers = total
        reasons = ", ".join(f"{n} {why}" for why, n in rejections.items())
        detail = f": {reasons}" if reasons else ""
        self.problem = f"0/{total} workers can take '{node_id}' (target {target}){detail}"
        super().__init__(
            f"{self.problem}. Start a worker that satisfies the target, free capacity on one, "
            "or pass allow_local_fallback=True to run the plan locally."
        )

    @property
    def busy_only(self) -> bool:
        """ "Not now": some worker satisfies the target and is only out of free slots."""
        return self.rejections.get(AT_CAPACITY, 0) > 0
