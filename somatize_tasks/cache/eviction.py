"""Keeping the content cache in bounds: stats, eviction by value density, pins, verify.

``collect`` follows Soma's ``cache gc``: values are evicted lowest *value
density* first, ``(compute ms + 1) x recency / size`` with recency
``1 / (1 + days since last used)``, until the cache holds at most
``max_bytes``; so a small state that took hours outlives a large
intermediate that took a second. A value is scored by the best record
naming it and goes with every record that names it (the next run computes it
again: eviction costs warmth, never correctness). Pinned keys are roots,
never evicted; nothing used within ``min_age_s`` is evicted (a run that is
going on may still read it). Values left without a record (a writer died
between the two) are deleted first, once ``min_age_s`` old.

``verify`` decodes every entry and checks it against its content hash.
"""

from __future__ import annotations

import base64
import io
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from somatize_tasks.cache.backend import CacheBackend
from somatize_tasks.cache.content import inline_value_size
from somatize_tasks.cache.hashing import value_hash
from somatize_tasks.cache.records import ACTIONS, PINS, CacheRecord, pin_key, record_key, value_key
from somatize_tasks.errors import CacheError
from somatize_tasks.store import CACHE_RUN, key_part
from somatize_tasks.store.codecs import codec_named


@dataclass
class CacheIndex:
    """Everything under ``__cache__/``: records, values (hash -> bytes, age), pins."""

    records: list[CacheRecord] = field(default_factory=list)
    values: dict[str, tuple[int, float]] = field(default_factory=dict)
    pins: dict[str, str] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)

    def size_of(self, record: CacheRecord) -> int:
        if record.inline is not None:
            return inline_value_size(record)
        return self.values.get(record.hash, (record.size, 0.0))[0]

    @property
    def bytes(self) -> int:
        inline = sum(inline_value_size(r) for r in self.records if r.inline is not None)
        return inline + sum(size for size, _ in self.values.values())


def read_index(backend: CacheBackend) -> CacheIndex:
    index = CacheIndex()
    for item in backend.listing(f"{CACHE_RUN}/"):
        if item.key.startswith(ACTIONS):
            raw = backend.read(item.key)
            try:
                index.records.append(CacheRecord.model_validate_json(raw or b""))
            except ValueError:
                index.unreadable.append(item.key)
        elif item.key.startswith(PINS):
            index.pins[item.key[len(PINS) :]] = (backend.read(item.key) or b"").decode()
        elif item.key.count("/") == 2:  # __cache__/<hash>/0
            index.values[item.key.split("/")[1]] = (item.size, item.modified_at)
    return index


def stats(backend: CacheBackend) -> dict[str, int | float]:
    """Entries, values, bytes held, compute banked (seconds) and hits served."""
    index = read_index(backend)
    live = [r for r in index.records if r.inline is not None or r.hash in index.values]
    return {
        "records": len(index.records),
        "values": len(index.values),
        "inline": sum(1 for r in index.records if r.inline is not None),
        "bytes": index.bytes,
        "compute_banked_s": round(sum(r.compute_s for r in live), 3),
        "hits": sum(r.hits for r in index.records),
        "pins": len(index.pins),
        "unreadable": len(index.unreadable),
    }


@dataclass
class GcReport:
    bytes_before: int = 0
    bytes_after: int = 0
    values_evicted: int = 0
    records_evicted: int = 0
    pinned: int = 0


def collect(backend: CacheBackend, max_bytes: int, min_age_s: float = 3600.0) -> GcReport:
    """Evict by value density until at most ``max_bytes`` are held (see the docstring)."""
    now = time.time()
    index = read_index(backend)
    report = GcReport(bytes_before=index.bytes, bytes_after=index.bytes)
    for key in index.unreadable:
        backend.delete(key)
    named = {r.hash for r in index.records if r.inline is None}
    for orphan, (size, modified) in list(index.values.items()):
        if orphan not in named and now - modified >= min_age_s:
            backend.delete(value_key(orphan))
            report.bytes_after -= size
            report.values_evicted += 1
    pinned = set(index.pins.values())
    report.pinned = len(pinned)
    for unit, size, records in _by_density(index, pinned, now, min_age_s):
        if report.bytes_after <= max_bytes:
            break
        if unit is not None:
            backend.delete(value_key(unit))
            report.values_evicted += 1
        for record in records:
            backend.delete(record_key(record.key))
            report.records_evicted += 1
        report.bytes_after -= size
    return report


def _by_density(
    index: CacheIndex, pinned: set[str], now: float, min_age_s: float
) -> Iterator[tuple[str | None, int, list[CacheRecord]]]:
    """Eviction units, lowest density first: a stored value with every record naming it,
    or one inline record alone. Pinned and recently used units are not offered."""
    units: dict[str, list[CacheRecord]] = {}
    for record in index.records:
        if record.inline is not None or record.hash in index.values:
            unit = f"inline:{record.key}" if record.inline is not None else record.hash
            units.setdefault(unit, []).append(record)
    scored = []
    for unit, records in units.items():
        if any(r.key in pinned or now - r.accessed_at < min_age_s for r in records):
            continue
        size = index.size_of(records[0])
        scored.append((max(r.density(now, size) for r in records), unit, size, records))
    for _, unit, size, records in sorted(scored, key=lambda item: item[0]):
        yield (None if unit.startswith("inline:") else unit), size, records


@dataclass
class VerifyReport:
    ok: int = 0
    bad: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def verify(backend: CacheBackend, *, delete_bad: bool = False) -> VerifyReport:
    """Decode every entry and check it against its content hash. Entries whose value
    does not match are ``bad`` (deleted, value and record, with ``delete_bad``);
    entries whose value was evicted are ``missing`` (not an error: recomputed)."""
    report = VerifyReport()
    index = read_index(backend)
    for record in index.records:
        raw = record_bytes(backend, record)
        if raw is None:
            report.missing.append(record.key)
            continue
        try:
            matches = value_hash(codec_named(record.codec).read(io.BytesIO(raw))) == record.hash
        except Exception:  # undecodable is corrupt too
            matches = False
        if matches:
            report.ok += 1
            continue
        report.bad.append(record.key)
        if delete_bad:
            backend.delete(record_key(record.key))
            if record.inline is None:
                backend.delete(value_key(record.hash))
    return report


def record_bytes(backend: CacheBackend, record: CacheRecord) -> bytes | None:
    if record.inline is not None:
        return base64.b64decode(record.inline)
    return backend.read(value_key(record.hash))


def pin(backend: CacheBackend, name: str, key: str) -> CacheRecord:
    """Make ``key`` a root ``cache gc`` never evicts, under ``name``."""
    key_part("pin name", name)
    raw = backend.read(record_key(key)) if re.fullmatch(r"[0-9a-f]{64}", key) else None
    if raw is None:
        raise CacheError(
            f"no cache entry has key '{key}' (a full 64-character key, as "
            "`somatize-tasks status RUN --json` shows under cache_key)"
        )
    backend.write(pin_key(name), key.encode())
    return CacheRecord.model_validate_json(raw)


def unpin(backend: CacheBackend, name: str) -> bool:
    key_part("pin name", name)
    found = backend.read(pin_key(name)) is not None
    backend.delete(pin_key(name))
    return found
