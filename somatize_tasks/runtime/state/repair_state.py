"""The repair half of a run's state in Redis: what the reaper reads and writes
while it mends a run (recomputations, grace periods, a new distribution).

Kept apart from :mod:`~somatize_tasks.runtime.state.redis_state` because none of it is
on a node's hot path; every field lives in the run's working-state hash
(``<p>:run:<id>:results``), whose TTL each write renews.
"""

from __future__ import annotations

import json

from redis import Redis
from redis.commands.core import Script

from somatize_tasks.config.clock import redis_now
from somatize_tasks.runtime.compile.values import Expr
from somatize_tasks.runtime.state.outbox_state import compact_json
from somatize_tasks.runtime.state.packing import pack
from somatize_tasks.runtime.state.seal import Seal


class RepairState:
    """Mixed into :class:`~somatize_tasks.runtime.state.redis_state.RedisRunState`."""

    client: Redis[bytes]
    meta: str
    results: str
    latest_outputs: str
    seal: Seal
    ttl_s: int
    _replace_latest: Script

    def _working(self, mapping: dict[str | bytes, bytes | float | int | str]) -> None:
        """Write fields of the working state, keeping its end."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hset(self.results, mapping=mapping)
        pipe.expire(self.results, self.ttl_s)
        pipe.execute()

    def count_stall(self, bid: int, epoch: int) -> int:
        """One more time block ``bid`` (pass ``epoch``) waited in vain for its
        transfers; how many times so far (kept with the working state)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hincrby(self.results, f"stall:{bid}:{epoch}", 1)
        pipe.expire(self.results, self.ttl_s)
        return int(pipe.execute()[0])

    def await_recompute(self, bid: int, epoch: int, producers: list[tuple[int, int]]) -> None:
        """Block ``bid`` waits until each producer (block, epoch) has run again."""
        self._working({f"rn:{bid}:{epoch}": len(producers)})
        for producer, producer_epoch in producers:
            field = f"rw:{producer}:{producer_epoch}"
            waiting = [
                w
                for w in json.loads(self.client.hget(self.results, field) or b"[]")
                if w != [bid, epoch]
            ]
            waiting.append([bid, epoch])
            self._working({field: compact_json(waiting), f"rc:{producer}:{producer_epoch}": 1})

    def take_recompute(
        self, bid: int, epoch: int, outputs: dict[str, Expr]
    ) -> list[tuple[int, int]] | None:
        """If this block ran again for the reaper: store its new outputs and return
        the (block, epoch) pairs waiting for it; None for an ordinary duplicate."""
        if not self.client.hdel(self.results, f"rc:{bid}:{epoch}"):
            return None
        pipe = self.client.pipeline()
        pipe.hget(self.results, f"rw:{bid}:{epoch}")
        pipe.hdel(self.results, f"rw:{bid}:{epoch}")
        waiting = json.loads(pipe.execute()[0] or b"[]")
        pairs = [
            x
            for node_id, expr in outputs.items()
            for x in (node_id, self.seal.close(f"latest:{node_id}", expr))
        ]
        if pairs:
            self._replace_latest(keys=[self.latest_outputs], args=[str(epoch), *pairs])
        return [(int(b), int(e)) for b, e in waiting]

    def recompute_arrived(self, bid: int, epoch: int) -> bool:
        """One recomputed input of the block is back; True when it was the last."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hincrby(self.results, f"rn:{bid}:{epoch}", -1)
        pipe.expire(self.results, self.ttl_s)
        return int(pipe.execute()[0]) <= 0

    def first_noticed(self, what: str) -> float:
        """When a repair problem (``what``) was first noticed, for grace periods."""
        field, now = f"g:{what}", redis_now(self.client)
        pipe = self.client.pipeline(transaction=False)
        pipe.hsetnx(self.results, field, now)
        pipe.expire(self.results, self.ttl_s)
        pipe.hget(self.results, field)
        return float(pipe.execute()[2] or now)

    def replace_distribution(self, distribution_json: str) -> None:
        """Store a new distribution and bump its version, so every process reloads it."""
        pipe = self.client.pipeline()
        pipe.hset(self.meta, "distribution", pack(distribution_json))
        pipe.hincrby(self.meta, "version", 1)
        pipe.execute()
