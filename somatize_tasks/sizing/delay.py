"""The p99 dispatch delay: the dispatch path's own time plus its waits on Redis' one thread.

The dispatch delay of a block is the time from its predecessor's end (the
moment it becomes ready) to the start of its first node on a worker. On its
way a block crosses processes and Redis: the worker that finished records
the result and publishes the next block (a few Redis calls), the target
worker's consumer, already blocked in ``BRPOP`` on its queue, gets the
message at once (kombu's polling timeout only bounds how long an *idle*
consumer blocks; it adds nothing to a message that arrives), hands it to a
pool process, which marks the block running (one more script) and starts it.

Two terms, modelled separately because they scale differently:

- **the path** (:data:`Costs.path_ms`): Python on the workers, round
  trips, process wakeups. It does not depend on how many workers a cluster
  has, but on the machine it runs on; it is *measured* as a distribution on
  a real run next to the check (``bench/check_simulate.py``), with Redis
  idle apart from the two real workers.
- **Redis' queue**: each of the path's ``calls`` Redis commands waits
  behind whatever else Redis is serving (heartbeats, reaper ticks, Celery's
  own polling, registry reads, other runs' dispatch). Redis serves one
  command at a time, so this is an M/G/1 queue whose service times are the
  measured per-command costs, arriving at the rates the cluster's shape
  gives. :func:`queue_waits` runs that queue call by call (Lindley's
  recursion; a Poisson arrival sees what an arbitrary call sees), so a rare
  long command (a full registry read) lengthens the tail exactly as often
  as it happens, which no single-exponential tail formula gets right when
  the load is mostly tiny calls.

:func:`dispatch_quantile_ms` adds ``calls`` waits drawn from that queue
to samples of the measured path (seeded: the same inputs give the same
answer) and returns the quantile; ``None`` when Redis is saturated.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

#: One kind of Redis command: (calls per second, seconds of Redis' thread per call).
Kind = tuple[float, float]


def utilisation(mix: Sequence[Kind]) -> float:
    """Fraction of Redis' one thread the mix keeps busy (``rho``)."""
    return sum(rate * service for rate, service in mix)


def queue_waits(mix: Sequence[Kind], customers: int | None = None, seed: int = 11) -> list[float]:
    """Waits (s) of ``customers`` calls in Redis' queue served ``mix`` (``rho`` < 1);
    by default a minute of Redis' time, at least 100,000 calls and at most 1,000,000.

    Calls arrive as one Poisson stream of the kinds' total rate, each of a
    kind chosen in proportion to its rate; Lindley's recursion gives each
    one's wait. The first 1 % (the queue filling from empty) is dropped.
    """
    kinds = [(rate, service) for rate, service in mix if rate > 0 and service > 0]
    if not kinds:
        return [0.0]
    if utilisation(kinds) >= 1.0:
        raise ValueError("Redis is saturated (utilisation >= 1): no stationary queue")
    rng = random.Random(seed)
    total = sum(rate for rate, _ in kinds)
    if customers is None:
        customers = int(min(1_000_000, max(100_000, 60 * total)))
    services = rng.choices([s for _, s in kinds], [r / total for r, _ in kinds], k=customers)
    wait, waits = 0.0, []
    for service in services:
        waits.append(wait)
        wait = max(0.0, wait + service - rng.expovariate(total))
    return waits[customers // 100 :]


def dispatch_quantile_ms(
    path_ms: Sequence[float],
    calls: float,
    mix: Sequence[Kind],
    quantile: float = 0.99,
    samples: int = 40_000,
    seed: int = 11,
) -> float | None:
    """The ``quantile`` of the dispatch delay (ms): a path sample plus ``calls`` waits.

    ``path_ms`` are the path's measured quantiles, evenly spaced from its
    minimum to its maximum (:func:`path_quantiles`); a path is drawn by
    interpolating between them. ``None`` when ``mix`` saturates Redis.
    """
    if not path_ms:
        raise ValueError("no measured dispatch path (path_ms is empty)")
    if utilisation(mix) >= 1.0:
        return None
    waits = queue_waits(mix, seed=seed) if calls > 0 else [0.0]
    rng = random.Random(seed)
    whole, part = int(calls), calls - int(calls)
    delays = []
    for index in range(samples):
        count = whole + (rng.random() < part)
        queued = sum(waits[rng.randrange(len(waits))] for _ in range(count))
        # Stratified: the path's own quantiles come out exact, not within the noise
        # of 40,000 draws, which is large where its last quantiles are far apart.
        delays.append(_draw(path_ms, (index + rng.random()) / samples) + queued * 1000)
    delays.sort()
    return delays[max(0, math.ceil(quantile * len(delays)) - 1)]


def path_quantiles(delays_ms: Sequence[float], points: int = 1001) -> list[float]:
    """``points`` quantiles of measured delays, minimum to maximum (what ``path_ms`` holds),
    to the µs. Fine-grained because a p99 sits where the last few delays are far apart:
    drawn between coarse quantiles, it would land wherever the straight line puts it."""
    if len(delays_ms) < 2:
        raise ValueError("need at least two measured delays")
    ordered = sorted(delays_ms)
    return [round(_draw(ordered, i / (points - 1)), 3) for i in range(points)]


def _draw(quantiles: Sequence[float], u: float) -> float:
    """The value at fraction ``u`` (0..1) of evenly spaced quantiles, interpolated."""
    position = u * (len(quantiles) - 1)
    index = min(int(position), len(quantiles) - 2) if len(quantiles) > 1 else 0
    if len(quantiles) == 1:
        return quantiles[0]
    share = position - index
    return quantiles[index] * (1 - share) + quantiles[index + 1] * share
