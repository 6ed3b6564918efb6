"""How one run of the fault matrix ended: correct, wrong, hung, a clear error, or another error.

A :class:`Waiter` follows a run with the real ``PlanRun.wait`` in a thread of
its own and judges it against a hard bound of the harness's own, so a
``wait`` that does not honour its timeout still counts as hung (never as
blocking the benchmark). A run's end is timed from the fault.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scheduler.errors import listing
from somatize_tasks.errors import RunTimeoutError, SomatizeError
from somatize_tasks.runtime.producer.handle import PlanRun

CORRECT, WRONG, HUNG, CLEAR, OTHER = "correct", "wrong", "hung", "clear error", "other error"
KINDS = (CORRECT, WRONG, HUNG, CLEAR, OTHER)
#: The run ended before the fault could be injected: not counted, only reported.
MISSED = "missed"
#: ``wait`` raised this while Redis was away: the harness waits on (and says so).
LOST_REDIS = "cannot reach Redis"


@dataclass
class Outcome:
    kind: str
    seconds: float | None = None  # from the fault to the run's end (correct or clear error)
    detail: str = ""


@dataclass
class Expectation:
    """What a right end looks like: the output, and (rows that cannot finish) the error."""

    output: Any = None
    clear: str | None = None  # a regex an error must match to count as clear
    wrong: str | None = None  # a regex of an error that means a forgery was believed
    #: Judges the output instead of ``output`` (a random value): why it is wrong, or None.
    check: Callable[[Any], str | None] | None = None


@dataclass
class Waiter:
    """``run.wait`` in a daemon thread; :meth:`outcome` judges it within ``bound_s``."""

    run: PlanRun
    expect: Expectation
    bound_s: float
    fault_at: float | None = None  # monotonic
    fault_wall: float | None = None  # the same moment, wall clock (compared with Redis' times)
    notes: list[str] = field(default_factory=list)
    fault_after_end: bool = False  # the row's fault is meant to come after the run ended
    _value: Any = None
    _error: BaseException | None = None
    _ended: float | None = None
    _started: float = field(default_factory=time.monotonic)
    _thread: threading.Thread | None = None

    def start(self) -> Waiter:
        self._thread = threading.Thread(target=self._wait, daemon=True, name="faults-wait")
        self._thread.start()
        return self

    def _wait(self) -> None:
        deadline = self._started + self.bound_s
        while True:
            try:
                self._value = self.run.wait(timeout=max(0.1, deadline - time.monotonic()))
            except SomatizeError as exc:
                if LOST_REDIS in str(exc) and time.monotonic() < deadline:
                    self.notes.append("wait() raised on lost Redis")
                    time.sleep(0.5)
                    continue
                self._error = exc
            except BaseException as exc:  # judged, never raised: the matrix counts it
                self._error = exc
            break
        self._ended = time.monotonic()

    def mark_fault(self, at: float | None = None) -> None:
        """The fault was injected now (or at monotonic ``at``)."""
        now = time.monotonic()
        self.fault_at = now if at is None else at
        self.fault_wall = time.time() - (now - self.fault_at)

    def _ended_before_fault(self) -> bool:
        if self.fault_at is None or (self._ended is not None and self._ended < self.fault_at):
            return True
        if self.fault_after_end:
            return False
        try:
            finished = self.run.status().finished_at
        except Exception:  # the state may be gone (Redis lost it): judged by wait()
            return False
        return finished is not None and self.fault_wall is not None and finished < self.fault_wall

    @property
    def done(self) -> bool:
        return self._ended is not None

    def outcome(self) -> Outcome:
        """Block until the run ends or its bound passes (plus 5 s of grace); judge it."""
        outcome = self._judge()
        if outcome.kind == HUNG:
            self.notes.append(self._waiting_on())
        if self.notes:
            outcome.detail = " ".join([outcome.detail, f"[{'; '.join(dict.fromkeys(self.notes))}]"])
        return outcome

    def _waiting_on(self) -> str:
        """What a hung run still waits on: its unfinished nodes, with state and worker."""
        try:
            status = self.run.status()
        except Exception as exc:  # the state may be gone; say so rather than fail the row
            return f"status unreadable: {type(exc).__name__}"
        open_nodes = [
            f"{node} {info.state}@{info.worker}"
            for node, info in status.nodes.items()
            if info.state in ("pending", "running")
        ]
        shown = listing(open_nodes, most=6)
        return f"run {status.state}; waits on: {shown or 'nothing pending or running'}"

    def _judge(self) -> Outcome:
        assert self._thread is not None
        self._thread.join(max(0.0, self._started + self.bound_s + 5 - time.monotonic()))
        if self._ended_before_fault():
            return Outcome(MISSED, None, "the run ended before its fault was injected")
        if self._ended is None:
            return Outcome(HUNG, None, f"no end within {self.bound_s:.0f} s (wait() blocked)")
        assert self.fault_at is not None
        took = self._ended - self.fault_at
        if self._error is None:
            if self.expect.check is not None:
                why = self.expect.check(self._value)
                return Outcome(CORRECT, took) if why is None else Outcome(WRONG, took, why)
            if self._value == self.expect.output:
                return Outcome(CORRECT, took)
            return Outcome(WRONG, took, f"returned {short(self._value)}")
        return judge_error(self._error, self.expect, took, self.bound_s)


def judge_error(
    error: BaseException, expect: Expectation, took: float | None, bound_s: float
) -> Outcome:
    text = f"{type(error).__name__}: {error}"
    if isinstance(error, RunTimeoutError):
        return Outcome(HUNG, None, f"no end within {bound_s:.0f} s")
    if expect.wrong and re.search(expect.wrong, text):
        return Outcome(WRONG, took, short(text))
    if isinstance(error, SomatizeError) and expect.clear and re.search(expect.clear, text):
        return Outcome(CLEAR, took, short(text))
    return Outcome(OTHER, took, short(text))


def short(value: Any, chars: int = 320) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= chars else text[: chars - 3] + "..."
