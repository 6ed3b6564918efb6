"""The content cache's parts without workers: hashes, identities, entries, eviction, CLI."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from somatize_tasks.cache.backend import DirectoryBackend
from somatize_tasks.cache.content import ContentCache
from somatize_tasks.cache.eviction import collect, pin, stats, unpin, verify
from somatize_tasks.cache.hashing import output_key, state_key, value_hash
from somatize_tasks.cache.identity import node_identity
from somatize_tasks.cache.records import CacheRecord, record_key, value_key
from somatize_tasks.catalog.entries import Catalog
from somatize_tasks.cli.maintenance import parse_size
from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import CacheError
from somatize_tasks.store import ArtifactRef, ArtifactStore
from tests.somatize_tasks.cli.test_cli_runs import cli


@pytest.fixture
def local(tmp_path: Path) -> Settings:
    return Settings(
        store_kind="local",
        store_dir=tmp_path / "store",
        cache_dir=tmp_path / "cache",
        ram_max_bytes=0,
        inline_max_bytes=64,
        worker_id="unit",
    )


@pytest.fixture
def cache(local: Settings) -> ContentCache:
    return ContentCache.for_store(local, ArtifactStore(local, "unit"))


# --- hashes and keys -----------------------------------------------------------------------


def test_value_hash_tells_apart_what_differs_and_only_that() -> None:
    distinct = [1, 1.0, True, "1", b"1", None, float("nan"), float("inf"), -0.0, 0.0, [1], {"1": 1}]
    assert len({value_hash(v) for v in distinct}) == len(distinct)
    assert value_hash({"a": 1, "b": [2, 3]}) == value_hash({"b": [2, 3], "a": 1})
    assert value_hash((1, 2)) == value_hash([1, 2])  # a tuple comes back from JSON a list
    assert value_hash(np.float64(2.5)) == value_hash(2.5)
    floats = np.arange(6.0).reshape(2, 3)
    assert value_hash(floats) == value_hash(np.asfortranarray(floats))
    assert value_hash(floats) != value_hash(floats.astype(np.float32))
    assert value_hash(floats) != value_hash(floats.reshape(3, 2))
    assert value_hash({"x": floats}) != value_hash({"x": floats + 1})


@pytest.mark.parametrize(
    "value", [[1.5, "a", None], {"k": [1, 2]}, np.arange(50.0), np.arange(3), b"\x00raw", "text"]
)
def test_a_value_and_its_round_trip_through_the_store_hash_alike(
    local: Settings, value: Any
) -> None:
    store = ArtifactStore(local, "unit")
    ref = store.put("r1", "n", 0, value)
    assert value_hash(store.get(ref)) == value_hash(value)


def test_state_and_output_keys_keep_labels_seeds_and_kinds_apart() -> None:
    config, x, y = "c" * 64, "x" * 64, "y" * 64
    keys = {
        state_key(config, x, None, None),
        state_key(config, x, y, None),
        state_key(config, x, None, 1),
        state_key(config, x, None, 2),
        output_key(config, x, y, None),
        output_key(config, y, x, None),
    }
    assert len(keys) == 6
    assert state_key(config, x, y, 7) == state_key(config, x, y, 7)


# --- identities ----------------------------------------------------------------------------


def _module(tmp_path: Path, name: str, source: str) -> Any:
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_node_is_its_name_its_config_and_its_code(tmp_path: Path) -> None:
    catalog = Catalog()
    one = _module(tmp_path, "ident_one", "def f(x, k=1):\n    return x + k\n")
    two = _module(tmp_path, "ident_two", "def f(x, k=1):\n    return x + k + 0\n")
    entry_one = catalog.register("one", one.f)
    entry_two = catalog.register("two", two.f)
    assert node_identity(entry_one, {}) == node_identity(entry_one, {"k": 1})  # the default
    assert node_identity(entry_one, {}) != node_identity(entry_one, {"k": 2})
    assert node_identity(entry_one, {}) != node_identity(entry_two, {})  # module and code
    edited = _module(tmp_path, "ident_one", "def f(x, k=1):\n    return x - k\n")
    assert node_identity(catalog.register("edited", edited.f), {}) != node_identity(entry_one, {})


def test_a_cache_version_stands_for_the_source_and_no_source_means_no_cache(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    catalog = Catalog()
    v1 = _module(tmp_path, "ver_a", "def f(x):\n    return x\n_ = None\n")
    v1.f._cache_version = "3"
    v2 = _module(tmp_path, "ver_a", "def f(x):\n    return -x\n")
    v2.f._cache_version = "3"
    assert node_identity(catalog.register("v1", v1.f), {}) == node_identity(
        catalog.register("v2", v2.f), {}
    )
    namespace: dict[str, Any] = {}
    exec("def g(x):\n    return x\n", namespace)  # no source file to read
    with caplog.at_level(logging.WARNING):
        assert node_identity(catalog.register("g", namespace["g"]), {}) is None
    assert "is not cached" in caplog.text and "cache_version" in caplog.text
    versioned = catalog.register("gv", namespace["g"], cache_version="1")
    assert node_identity(versioned, {}) is not None


# --- entries -------------------------------------------------------------------------------


def _stored(cache: ContentCache, key: str, value: Any, run: str = "r1") -> CacheRecord:
    ref = cache.artifacts.put(run, "n", 0, value)
    assert cache.store(key, "output", value_hash(value), ref.model_dump(mode="json"), 0.5)
    raw = cache.backend.read(record_key(key))
    assert raw is not None
    return CacheRecord.model_validate_json(raw)


def test_an_entry_is_found_checked_and_adopted_by_a_run(cache: ContentCache) -> None:
    key = "a" * 64
    value = list(range(100))  # not inline: it is a value of its own in the store
    record = _stored(cache, key, value)
    assert record.inline is None and record.hash == value_hash(value)
    hit = cache.lookup(key)
    assert hit is not None and hit.value == value
    adopted = cache.adopt(hit, "r2", "m", 0, shared=True)
    assert (adopted["run_id"], adopted["node_id"]) == ("r2", "m")
    assert cache.artifacts.get(ArtifactRef.model_validate(adopted)) == value
    touched = CacheRecord.model_validate_json(cache.backend.read(record_key(key)) or b"")
    assert touched.hits == 1 and touched.accessed_at >= record.accessed_at
    small = "b" * 64
    assert _stored(cache, small, 3).inline is not None  # inline: lives in its record
    assert cache.lookup(small) is not None and cache.lookup("c" * 64) is None


def test_a_corrupt_or_missing_entry_is_a_miss_and_a_new_store_heals_it(
    cache: ContentCache, local: Settings
) -> None:
    key, value = "d" * 64, list(range(100))
    record = _stored(cache, key, value)
    blob = local.store_dir / value_key(record.hash)
    good = blob.read_bytes()
    blob.write_bytes(good.replace(b"99", b"98"))  # same size, another value
    assert cache.lookup(key) is None
    _stored(cache, key, value, run="r3")  # the node ran again: the right value is back
    assert blob.read_bytes() == good and cache.lookup(key) is not None
    (local.store_dir / record_key(key)).write_text("{not json")
    assert cache.lookup(key) is None
    other = "e" * 64
    (local.store_dir / record_key(key)).write_text(
        record.model_copy(update={"key": other}).model_dump_json()
    )
    assert cache.lookup(key) is None  # a record under the wrong key
    _stored(cache, key, value, run="r4")
    blob.unlink()
    for copy in local.cache_dir.rglob(f"__cache__/{record.hash}/0"):
        copy.unlink()
    assert cache.lookup(key) is None


# --- eviction, pins, verify ----------------------------------------------------------------


def _record(backend: DirectoryBackend, key: str, size: int, compute_s: float, age_s: float) -> None:
    content = key[::-1]
    backend.write(value_key(content), b"x" * size)
    at = time.time() - age_s
    record = CacheRecord(
        key=key,
        kind="output",
        hash=content,
        codec="bytes",
        size=size,
        compute_s=compute_s,
        created_at=at,
        accessed_at=at,
    )
    backend.write(record_key(key), record.model_dump_json().encode())


def test_gc_evicts_by_value_density_and_keeps_pins_and_recent_entries(local: Settings) -> None:
    backend = DirectoryBackend(local.store_dir)
    cheap_big, dear_small, pinned, fresh = "1" * 64, "2" * 64, "3" * 64, "4" * 64
    _record(backend, cheap_big, 10_000, compute_s=0.1, age_s=7200)
    _record(backend, dear_small, 1_000, compute_s=600.0, age_s=7200)
    _record(backend, pinned, 20_000, compute_s=0.1, age_s=7200)
    _record(backend, fresh, 10_000, compute_s=0.0, age_s=0)
    backend.write(value_key("f" * 64), b"orphan")  # a value whose record never came
    old = time.time() - 7200
    os.utime(local.store_dir / value_key("f" * 64), (old, old))
    pin(backend, "keep", pinned)
    before = stats(backend)
    assert (before["records"], before["values"], before["pins"]) == (4, 5, 1)
    report = collect(backend, max_bytes=35_000, min_age_s=3600)
    assert report.bytes_before == 41_006 and report.bytes_after == 31_000
    assert backend.read(record_key(cheap_big)) is None  # lowest density went first
    for kept in (dear_small, pinned, fresh):
        assert backend.read(record_key(kept)) is not None
    report = collect(backend, max_bytes=0, min_age_s=3600)
    assert backend.read(record_key(dear_small)) is None  # then the next one
    assert backend.read(record_key(pinned)) is not None and backend.read(record_key(fresh))
    assert unpin(backend, "keep") and not unpin(backend, "keep")
    collect(backend, max_bytes=0, min_age_s=0)
    assert stats(backend)["bytes"] == 0
    with pytest.raises(CacheError, match="no cache entry"):
        pin(backend, "gone", pinned)
    with pytest.raises(CacheError, match="no cache entry"):
        pin(backend, "bad", "../../etc")


def test_verify_finds_values_that_do_not_match_their_hash(
    cache: ContentCache, local: Settings
) -> None:
    good, bad = "5" * 64, "6" * 64
    _stored(cache, good, list(range(50)))
    record = _stored(cache, bad, list(range(60)))
    blob = local.store_dir / value_key(record.hash)
    blob.write_bytes(blob.read_bytes().replace(b"59", b"58"))
    report = verify(cache.backend)
    assert (report.ok, report.bad) == (1, [bad])
    verify(cache.backend, delete_bad=True)
    assert verify(cache.backend).bad == [] and cache.lookup(bad) is None


def test_the_cache_commands(cache: ContentCache, local: Settings) -> None:
    key = "7" * 64
    _stored(cache, key, list(range(80)))
    shown = cli("cache", "stats", "--json", settings=local)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["records"] == 1
    pinned = cli("cache", "pin", "best", key, settings=local)
    assert pinned.returncode == 0 and "pinned" in pinned.stdout
    missing = cli("cache", "pin", "x", "8" * 64, settings=local)
    assert missing.returncode == 1 and "no cache entry" in missing.stderr
    swept = cli("cache", "gc", "--max-size", "0", "--min-age", "0", settings=local)
    assert swept.returncode == 0 and "1 pinned" in swept.stdout
    assert cache.lookup(key) is not None
    checked = cli("cache", "verify", settings=local)
    assert checked.returncode == 0 and "1 entr(y/ies) match" in checked.stdout
    wrong = cli("cache", "gc", "--max-size", "lots", settings=local)
    assert wrong.returncode != 0 and "not a size" in wrong.stderr


def test_sizes() -> None:
    assert parse_size("20G") == 20 * 1024**3
    assert parse_size("500MiB") == 500 * 1024**2
    assert parse_size("1234") == 1234
    with pytest.raises(CacheError):
        parse_size("-1K")
