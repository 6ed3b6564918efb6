"""Fake workers switched on and off every ~0.25 s, and samples sorted by which was on.

On a shared machine the load moves by the second: a chain measured with the
fakes and another one measured a few seconds later without them differ by
as much as the fakes could ever change. Switching the fakes on and off
many times *within* one chain, and sorting each sample by the state at its
midpoint, puts both states under the same machine load. (Leaving out the
samples that straddle a switch would leave out more of the long ones: a
bias in exactly the tail being measured.)
"""

from __future__ import annotations

import bisect
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from bench.fake_workers import FakeWorkers


class Switches:
    """When the fakes were paused (``True``) or heartbeating, by wall-clock time."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.paused: list[bool] = []

    def add(self, at: float, paused: bool) -> None:
        self.times.append(at)
        self.paused.append(paused)

    def state(self, at: float) -> bool | None:
        """Paused (True) or on at ``at``; None before the first switch."""
        index = bisect.bisect_right(self.times, at) - 1
        return None if index < 0 else self.paused[index]


@contextmanager
def switching(fakes: FakeWorkers, period_s: float = 0.25, seed: int = 7) -> Iterator[Switches]:
    """Pause and resume ``fakes`` every ``period_s`` (jittered, so that nothing periodic
    in the cluster always lands in one state) until the block ends."""
    switches, stop = Switches(), threading.Event()
    rng = random.Random(seed)

    def run() -> None:
        paused = False
        while not stop.is_set():
            paused = not paused
            (fakes.pause if paused else fakes.resume)()
            switches.add(time.time(), paused)
            stop.wait(rng.uniform(0.6, 1.4) * period_s)
        fakes.resume()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield switches
    finally:
        stop.set()
        thread.join()


def split(spans: list[tuple[float, float]], switches: Switches) -> tuple[list[float], list[float]]:
    """Delays (ms) of ``spans`` (ready, started) whose midpoint was paused, and on."""
    paused: list[float] = []
    running: list[float] = []
    for start, end in spans:
        state = switches.state((start + end) / 2)
        if state is not None:
            (paused if state else running).append((end - start) * 1000)
    return paused, running
