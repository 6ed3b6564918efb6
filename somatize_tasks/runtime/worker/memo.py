"""A block's use of the content cache: the keys of its nodes, their hits and stores.

A key is made on the worker, with the node's input in hand as content
hashes (:mod:`somatize_tasks.cache.hashing`): every output a cache-on run
stores carries its content hash in its expression (``{"ref": ..., "hash":
...}``), so a node whose input is another node's cached output knows its key
without fetching that output. A value that arrives without one (the run's
input, a value the producer stored) is hashed once, when first needed. An
object of several predecessors is keyed by their hashes.

Which nodes are cached, as Soma's executor: every Filter's fit (its state)
and every forward of a node that is ``deterministic`` (the default); never a
``Step`` (its effects are not a function of its input), never a composite
fit. A Stream is cached as one computation of all its nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from somatize_tasks.cache.content import ContentCache, Hit, Kind
from somatize_tasks.cache.hashing import (
    Digest,
    combine,
    mapping_hash,
    output_key,
    state_key,
    value_hash,
)
from somatize_tasks.cache.identity import node_identity
from somatize_tasks.catalog.entries import BoundNode
from somatize_tasks.runtime.compile.program import Program
from somatize_tasks.runtime.compile.values import Expr

HASH = "hash"


@dataclass(frozen=True)
class NodeKeys:
    """What a node's cache keys are made of: its config hash and its input's hash."""

    memo: BlockMemo
    config: Digest
    input: Digest


def hashed(expr: Expr, digest: Digest) -> Expr:
    """``expr`` carrying the content hash of its value (old readers ignore the key)."""
    return {**expr, HASH: digest}


class BlockMemo:
    """The content cache as one block of one run uses it."""

    def __init__(
        self,
        cache: ContentCache,
        program: Program,
        run_id: str,
        fetch: Callable[[dict[str, Any]], Any],
    ) -> None:
        self.cache = cache
        self.program = program
        self.run_id = run_id
        self.fetch = fetch
        self._by_ref: dict[str, Digest] = {}
        self._identities: dict[str, Digest | None] = {}
        self._labels: Digest | None = None

    # --- content hashes ----------------------------------------------------------------

    def expr_hash(self, expr: Expr) -> Digest:
        """The content hash of the value ``expr`` stands for, fetching it only if unknown."""
        if HASH in expr:
            return str(expr[HASH])
        if "ref" in expr:
            ref = expr["ref"]
            key = (
                f"{ref.get('run_id')}/{ref.get('node_id')}#{ref.get('iteration', 0)}"
                f"#{ref.get('attempt', 0)}"
            )
            if key not in self._by_ref:
                self._by_ref[key] = value_hash(self.fetch(ref))
            return self._by_ref[key]
        for kind in ("map", "graph"):
            if kind in expr:
                return mapping_hash({k: self.expr_hash(v) for k, v in expr[kind].items()})
        return value_hash(expr.get("value"))

    def labels_hash(self) -> Digest | None:
        labels = self.program.labels
        if labels is None:
            return None
        if self._labels is None:
            self._labels = self.expr_hash(labels)
        return self._labels

    # --- keys --------------------------------------------------------------------------

    def identity(self, node_id: str, bound: BoundNode) -> Digest | None:
        """The node's config hash, or None when it has none (it is then never cached)."""
        if node_id not in self._identities:
            self._identities[node_id] = node_identity(bound.entry, bound.params)
        return self._identities[node_id]

    def keys(self, node_id: str, bound: BoundNode, input_expr: Expr) -> NodeKeys | None:
        """The node's key material, or None when it has no identity (never cached)."""
        config = self.identity(node_id, bound)
        return None if config is None else NodeKeys(self, config, self.expr_hash(input_expr))

    def state_hash(self, node_id: str, state: Any) -> Digest:
        """The hash of the state a forward uses: the run's (by its expression), or the
        value itself (None when the node has none)."""
        expr = self.program.states.get(node_id)
        return value_hash(state) if expr is None else self.expr_hash(expr)

    def state_key(self, config: Digest, input_hash: Digest) -> Digest:
        return state_key(config, input_hash, self.labels_hash(), self.program.seed)

    def output_key(self, config: Digest, state: Digest, input_hash: Digest) -> Digest:
        return output_key(config, state, input_hash, self.program.seed)

    def stream_key(
        self, nodes: list[str], bound: Mapping[str, BoundNode], input_expr: Expr, chunk_size: int
    ) -> Digest | None:
        """A whole Stream: every node's config and starting state, the chunking, the
        input; None if one of its nodes is never cached."""
        if not all(bound[n].entry.deterministic for n in nodes):
            return None
        parts: list[Digest] = []
        for node_id in nodes:
            config = self.identity(node_id, bound[node_id])
            if config is None:
                return None
            parts += [config, self.state_hash(node_id, None)]
        combined = combine("stream", str(chunk_size), *parts)
        return output_key(combined, value_hash(None), self.expr_hash(input_expr), self.program.seed)

    # --- entries -----------------------------------------------------------------------

    def lookup(self, key: Digest) -> Hit | None:
        return self.cache.lookup(key)

    def adopt(self, hit: Hit, node_id: str, epoch: int, *, shared: bool, attempt: int) -> Expr:
        """A hit as ``node_id``'s value in this run, with its content hash."""
        ref = self.cache.adopt(hit, self.run_id, node_id, epoch, shared=shared, attempt=attempt)
        return hashed({"ref": ref}, hit.record.hash)

    def store(
        self, key: Digest | None, kind: Kind, stored: Expr, value: Any, compute_s: float
    ) -> Expr:
        """``stored`` (a value the run stored) with its content hash, and kept in the
        cache under ``key`` when there is one."""
        content = value_hash(value)
        if key is not None and "ref" in stored:
            self.cache.store(key, kind, content, stored["ref"], compute_s)
        return hashed(stored, content)
