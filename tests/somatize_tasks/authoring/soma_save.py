"""Writing a checkpoint bundle exactly as Soma's ``Graph.save`` writes one
(soma-python ``_checkpoint.py``: manifest, then each state split into
``states/<id>.safetensors`` for tensors and ``states/<id>.json`` for the rest).

Independent of the project's own bundle writer, so a test reading what this
writes checks the reader against Soma's format, not against itself.
"""

from __future__ import annotations

import datetime as dt
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save as st_save_bytes

from testkit import soma_filters

#: The filter graph the bundle tests use: scale -> (centre, affine) -> join.
NODES = [
    {"id": "scale", "class_path": "testkit.soma_filters.Scale", "kwargs": {"factor": 2.0}},
    {"id": "centre", "class_path": "testkit.soma_filters.Centre", "kwargs": {}},
    {
        "id": "affine",
        "class_path": "testkit.soma_filters.Affine",
        "class_version": 2,
        "kwargs": {"note": "fitted"},
    },
    {"id": "join", "class_path": "testkit.soma_filters.Join", "kwargs": {}},
]
EDGES = [("scale", "centre"), ("scale", "affine"), ("centre", "join"), ("affine", "join")]
JSON_STATES: dict[str, Any] = {
    "centre": {"mean": 3.0},
    "affine": {"w": [2.0], "b": [1.0], "note": "fitted"},
}
TENSOR_STATES: dict[str, tuple[dict[str, np.ndarray], Any]] = {
    "centre": ({}, {"mean": 3.0}),
    "affine": ({"w": np.array([2.0]), "b": np.array([1.0])}, {"note": "fitted"}),
}


def soma_save(
    path: Path,
    nodes: list[dict[str, Any]],
    edges: list[tuple[str, str]],
    json_states: dict[str, Any] | None = None,
    tensor_states: dict[str, tuple[dict[str, np.ndarray], Any]] | None = None,
) -> Path:
    """A bundle as ``Graph.save(path)`` writes it."""
    manifest = {
        "soma_checkpoint_format": 1,
        "saved_at": dt.datetime.now(dt.UTC).isoformat(),
        "topology": {
            "nodes": [
                {
                    "id": n["id"],
                    "class_path": n["class_path"],
                    "class_version": n.get("class_version", 1),
                    "kwargs": n.get("kwargs", {}),
                }
                for n in nodes
            ],
            "edges": [{"source": s, "target": t} for s, t in edges],
        },
    }
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("manifest.json", json.dumps(manifest, indent=2))
        for nid, state in (json_states or {}).items():
            zf.writestr(f"states/{nid}.json", json.dumps(state))
        for nid, (tensors, rest) in (tensor_states or {}).items():
            if tensors:
                zf.writestr(f"states/{nid}.safetensors", st_save_bytes(tensors))
            if rest is not None:
                zf.writestr(f"states/{nid}.json", json.dumps(rest))
    return path


def by_hand(x: list[float]) -> dict[str, Any]:
    """What the classes compute for ``x`` with the bundle's states (no framework)."""
    scaled = soma_filters.Scale(2.0).forward(x, None)
    centred = soma_filters.Centre().forward(scaled, {"mean": 3.0})
    affine = soma_filters.Affine().forward(scaled, {"w": [2.0], "b": [1.0]})
    return soma_filters.Join().forward({"centre": centred, "affine": affine}, None)
