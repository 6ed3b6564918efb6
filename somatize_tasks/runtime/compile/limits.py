"""How far a run may go before the reaper ends it: ``submit_plan``'s limits.

``deadline_s`` ends the run with ``RunDeadlineError`` if it has not ended
that many seconds after it was submitted; ``max_node_deaths`` ends it with
``KilledWorkerError`` once one block's worker died while running it that
many times (see :mod:`somatize_tasks.runtime.recovery.deaths`); ``max_passes``
ends it with ``RunBudgetError`` when its loops would make more passes than that,
all together (:mod:`somatize_tasks.runtime.state.start_state`). A deployment sets
defaults for the first and the last (``SOMATIZE_RUN_DEADLINE_S``,
``SOMATIZE_RUN_MAX_PASSES``). All are kept in the run's meta, where every watcher
reads them.
"""

from __future__ import annotations

from dataclasses import dataclass

from somatize_tasks.errors import PlanInputError


@dataclass(frozen=True)
class RunLimits:
    """A run's limits; checked when built, so bad values are named before anything runs."""

    deadline_s: float | None = None
    max_node_deaths: int | None = None
    max_passes: int | None = None

    def __post_init__(self) -> None:
        deadline, deaths = self.deadline_s, self.max_node_deaths
        passes = self.max_passes
        if passes is not None and (
            isinstance(passes, bool) or not isinstance(passes, int) or passes < 1
        ):
            raise PlanInputError(f"max_passes must be a whole number of at least 1, not {passes!r}")
        if deadline is not None and (
            isinstance(deadline, bool) or not isinstance(deadline, int | float) or deadline <= 0
        ):
            raise PlanInputError(
                f"deadline_s must be a positive number of seconds, not {deadline!r}"
            )
        if deaths is not None and (
            isinstance(deaths, bool) or not isinstance(deaths, int) or deaths < 1
        ):
            raise PlanInputError(
                f"max_node_deaths must be a whole number of at least 1, not {deaths!r}"
            )

    def meta(self, created_at: float) -> dict[str | bytes, bytes | float | int | str]:
        """The run meta fields the reaper reads."""
        found: dict[str | bytes, bytes | float | int | str] = {}
        if self.deadline_s is not None:
            found.update(deadline_s=self.deadline_s, deadline_at=created_at + self.deadline_s)
        if self.max_node_deaths is not None:
            found["max_node_deaths"] = self.max_node_deaths
        if self.max_passes is not None:
            found["max_passes"] = self.max_passes
        return found

    def with_defaults(self, deadline_s: float | None, max_passes: int | None) -> RunLimits:
        """These limits, with a deployment's defaults (``SOMATIZE_RUN_DEADLINE_S``,
        ``SOMATIZE_RUN_MAX_PASSES``) where the run set none of its own."""
        return RunLimits(
            self.deadline_s if self.deadline_s is not None else deadline_s,
            self.max_node_deaths,
            self.max_passes if self.max_passes is not None else max_passes,
        )
