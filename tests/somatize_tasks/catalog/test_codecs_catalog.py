"""Codecs and the node catalog."""

from __future__ import annotations

import io
import pickle
from typing import Any

import numpy as np
import pytest

from somatize_tasks.catalog.entries import Catalog, call_node, load_catalog_modules, node
from somatize_tasks.errors import (
    CatalogError,
    CodecError,
    DuplicateNodeError,
    NodeParamsError,
    UnknownNodeError,
)
from somatize_tasks.store.codecs import Codec, codec_for, codec_named, register_codec


def roundtrip(value: Any) -> Any:
    codec = codec_for(value)
    buffer = io.BytesIO()
    codec.write(value, buffer)
    buffer.seek(0)
    return codec_named(codec.name).read(buffer)


def test_builtin_codecs_roundtrip() -> None:
    assert roundtrip({"a": [1, 2.5, None, "x"], "b": True}) == {"a": [1, 2.5, None, "x"], "b": True}
    assert roundtrip({"n": np.int64(3)}) == {"n": 3}
    assert roundtrip(b"\x00raw") == b"\x00raw"
    array = np.arange(12, dtype=np.int16).reshape(3, 4)
    back = roundtrip(array)
    assert back.dtype == np.int16 and np.array_equal(back, array)


def test_unencodable_values_name_their_type() -> None:
    with pytest.raises(CodecError, match=r"builtins\.set"):
        codec_for({1, 2})
    with pytest.raises(CodecError, match="dtype object"):
        codec_for(np.array([object()], dtype=object))
    with pytest.raises(CodecError, match="complex"):
        codec_for({"z": 1j}).write({"z": 1j}, io.BytesIO())


def test_npy_never_unpickles() -> None:
    buffer = io.BytesIO()
    np.save(buffer, np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    buffer.seek(0)
    with pytest.raises(ValueError, match="allow_pickle"):
        codec_named("npy").read(buffer)


class Point:
    def __init__(self, x: int, y: int) -> None:
        self.x, self.y = x, y


def test_registered_codec_is_used_for_its_type() -> None:
    register_codec(
        Codec(
            "test-point",
            accepts=lambda value: isinstance(value, Point),
            write=lambda value, fh: fh.write(f"{value.x},{value.y}".encode()) and None,
            read=lambda fh: Point(*map(int, fh.read().decode().split(","))),
        )
    )
    back = roundtrip(Point(3, 4))
    assert (back.x, back.y) == (3, 4)
    with pytest.raises(CodecError, match="already registered"):
        register_codec(Codec("json", lambda v: False, lambda v, f: None, lambda f: None))
    with pytest.raises(CodecError, match="unknown codec 'nope'"):
        codec_named("nope")


def test_node_registration_forms_and_calls() -> None:
    catalog = Catalog()

    @node(catalog=catalog)
    def plain(x: int, k: int = 1) -> int:
        return x + k

    @node("named", catalog=catalog)
    def other(x: int) -> int:
        return -x

    @node("scaler", catalog=catalog)
    class Scaler:
        instances = 0

        def __init__(self, factor: float = 1.0) -> None:
            self.factor = factor
            Scaler.instances += 1

        def fit(self, x: list[float], y: Any = None) -> float:
            return max(x)

        def forward(self, x: list[float], state: float) -> list[float]:
            return [self.factor * item / state for item in x]

    assert catalog.names() == ["named", "plain", "scaler"]
    assert call_node(catalog.get("plain"), 1, {"k": 5}) == 6
    assert call_node(catalog.get("named"), 2, {}) == -2
    assert call_node(catalog.get("scaler"), [1.0, 2.0], {"factor": 4}) == [2.0, 4.0]
    call_node(catalog.get("scaler"), [1.0], None)
    assert Scaler.instances == 2  # a fresh instance per call


def test_catalog_errors_name_node_worker_and_contents() -> None:
    catalog = Catalog(worker_id="w-gpu")
    catalog.register("load", len)
    with pytest.raises(UnknownNodeError) as caught:
        catalog.get("train")
    assert "'train'" in str(caught.value) and "'w-gpu'" in str(caught.value)
    assert "load" in str(caught.value) and caught.value.available == ("load",)

    def first(x: int) -> int:
        return x

    def second(x: int) -> int:
        return x

    catalog.register("f", first)
    with pytest.raises(DuplicateNodeError, match="already registered"):
        catalog.register("f", second)
    with pytest.raises(NodeParamsError, match=r"node 'f'.*\['bogus'\]"):
        call_node(catalog.get("f"), 1, {"bogus": 2})
    with pytest.raises(CatalogError, match="neither a callable"):
        catalog.register("x", 42)


def test_unknown_node_error_survives_pickling_and_rebuild_from_message() -> None:
    error = UnknownNodeError.for_node("n", "w", ["a"])
    again = pickle.loads(pickle.dumps(error))
    assert str(again) == str(error) and again.node == "n"
    assert str(UnknownNodeError(str(error))) == str(error)


def test_load_catalog_modules_imports_and_names_failures() -> None:
    names = load_catalog_modules(["somatize_tasks.examples.nodes"])
    assert {
        "load",
        "normalize",
        "train_svm",
        "train_knn",
        "evaluate",
        "good_enough",
        "export",
        "adjust",
        "retrain",
        "check",
        "double",
        "add_one",
        "scale",
    } <= set(names)
    with pytest.raises(CatalogError, match="no_such_module"):
        load_catalog_modules(["no_such_module"])
