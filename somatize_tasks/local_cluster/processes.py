"""Child processes that can always be stopped: one process group each.

Every child starts in a new session, so it leads a process group of its own
and everything it forks (a Celery worker's pool processes) stays in that
group: stopping the group stops them all. The terminal's Ctrl-C reaches
only the parent, which then stops its children in order (workers first,
Redis last) instead of letting them race.

A child may also be tied to its parent (``tie_to_parent``): on Linux it
gets SIGTERM if the parent dies without cleaning up (``PR_SET_PDEATHSIG``),
so even a SIGKILLed demo leaves nothing behind. ``cluster up`` does not tie
its children: they must outlive the command that started them.

:class:`ProcessRef` names a process by pid *and* start time, so a stale
state file can never make ``cluster down`` signal an unrelated process that
reused the pid.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child, between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def start_time_ticks(pid: int) -> int | None:
    """The process's start time (clock ticks since boot, Linux), or None if unknown or gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


@dataclass(frozen=True)
class ProcessRef:
    """A process (and its group) identified by pid and start time."""

    pid: int
    start_ticks: int | None = None

    @classmethod
    def of(cls, pid: int) -> ProcessRef:
        return cls(pid, start_time_ticks(pid))

    def alive(self) -> bool:
        """True while the very process this ref names exists (not a pid reuse)."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return False  # not ours: certainly not the process we started
        if self.start_ticks is None or not Path("/proc").is_dir():
            return True
        return start_time_ticks(self.pid) == self.start_ticks

    def pid_taken(self) -> bool:
        """True if some process other than this one now holds the pid."""
        if self.start_ticks is None:
            return False
        current = start_time_ticks(self.pid)
        return current is not None and current != self.start_ticks

    def group_alive(self) -> bool:
        """True while any process of the group remains (pool children included)."""
        try:
            os.killpg(self.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)


def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    log_path: Path,
    tie_to_parent: bool,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` as the leader of a new process group, output to ``log_path``."""
    tie = tie_to_parent and sys.platform.startswith("linux")
    with log_path.open("ab") as log, interrupts_held():
        return subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # Only a prctl() call runs between fork and exec; no lock is taken.
            preexec_fn=_die_with_parent if tie else None,  # noqa: PLW1509
        )


def stop_group(
    ref: ProcessRef,
    *,
    grace_s: float,
    first_signal: int | None = signal.SIGTERM,
    reap: Callable[[], object] | None = None,
) -> None:
    """``first_signal`` to the group, SIGKILL after ``grace_s`` if any of it is left.

    ``first_signal=None``: the caller has signalled the group already; just wait.

    ``reap`` (a ``Popen.poll``) collects the leader when it is our own child,
    so it does not linger as a zombie and count as alive.
    """
    if not ref.alive() and (ref.pid_taken() or not ref.group_alive()):
        # The leader is gone, and its pid now names another process (whose group
        # is not ours) or nothing of its group is left: either way, hands off.
        return
    if first_signal is not None:
        ref.signal_group(first_signal)
    if not wait_until(lambda: _gone(ref, reap), grace_s):
        ref.signal_group(signal.SIGKILL)
        wait_until(lambda: _gone(ref, reap), 5.0)


def _gone(ref: ProcessRef, reap: Callable[[], object] | None) -> bool:
    if reap is not None:
        reap()
    return not ref.group_alive()


def wait_until(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.05) -> bool:
    """Poll ``predicate`` until true or ``timeout_s`` passes; its last answer."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()


@contextlib.contextmanager
def signals_deferred(*signals: int) -> Iterator[None]:
    """Ignore ``signals`` inside the block (a second Ctrl-C must not cut a cleanup short).

    Only the main thread may change signal handlers; elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, SIGTERM or SIGHUP, raised so that every ``finally`` runs."""


_held = threading.local()


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Inside the block a signal is noted, and raised when the block ends.

    Forking runs Python callbacks (``os.register_at_fork``, e.g. logging's)
    where an exception is printed and dropped: an interrupt raised there
    would be lost, and the demo would carry on as if nothing happened.
    """
    depth = getattr(_held, "depth", 0)
    _held.depth = depth + 1
    try:
        yield
    finally:
        _held.depth = depth
        pending = getattr(_held, "pending", None)
        if depth == 0 and pending is not None:
            _held.pending = None
            raise Interrupted(pending)


def _in_finalizer(frame: FrameType | None) -> bool:
    """Whether the interrupted code runs inside some object's ``__del__``."""
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def interrupts_raise() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted` (named after the signal).

    Main thread only; elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        if getattr(_held, "depth", 0):
            _held.pending = getattr(_held, "pending", None) or name
            return
        if _in_finalizer(frame):
            # Python ignores an exception raised inside __del__ (it would be lost):
            # deliver the signal again a moment later, outside the finalizer.
            threading.Timer(0.05, os.kill, (os.getpid(), signum)).start()
            return
        raise Interrupted(name)

    watched = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, handler) for sig in watched}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
