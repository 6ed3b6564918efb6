"""Soma checkpoint bundles (``Graph.save``'s ``model.zip``), read and written as Soma does.

A bundle is a zip holding ``manifest.json``::

    {"soma_checkpoint_format": 1, "saved_at": "...",
     "topology": {"nodes": [{"id": "scale", "class_path": "mylab.filters.Scale",
                             "class_version": 1, "kwargs": {"factor": 2}}, ...],
                  "edges": [{"source": "scale", "target": "model"}, ...]}}

and each node's state as ``states/<id>.json`` and/or ``states/<id>.safetensors``
(:mod:`somatize_tasks.authoring.bundle_states`). With no edges, the nodes
form a chain in their listed order, as ``Graph.load`` reads it.

A bundle runs here as it is: its topology compiles to a plan and its
predecessors as Soma's compiler compiles it (:mod:`somatize_tasks.authoring.topology`),
each node's ``kwargs`` are its parameters, and its op is ``class:<class_path>@<version>``:
a worker imports that class only when its module is under one of the
prefixes it allows (``SOMATIZE_ALLOWED_MODULES``), and checks the version
as ``Graph.load`` does (:mod:`somatize_tasks.catalog.classes`).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scheduler import load_plan_document
from somatize_tasks.authoring.build import BuiltPlan
from somatize_tasks.authoring.bundle_states import read_state, write_state
from somatize_tasks.authoring.topology import plan_of_graph, predecessors_of
from somatize_tasks.catalog.classes import class_op
from somatize_tasks.errors import BundleError

MANIFEST = "manifest.json"
FORMAT_VERSION = 1
#: The manifest is read whole: a bigger one is refused rather than read.
MAX_MANIFEST_BYTES = 64 << 20


@dataclass(frozen=True)
class BundleNode:
    """One node of a bundle's topology, as the manifest lists it."""

    id: str
    class_path: str
    class_version: int = 1
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SomaBundle:
    """A bundle's topology and states; ``source`` names it in errors."""

    nodes: tuple[BundleNode, ...]
    edges: tuple[tuple[str, str], ...]
    states: dict[str, Any]
    source: str = "bundle"

    @property
    def node_ids(self) -> list[str]:
        return [n.id for n in self.nodes]

    def graph_edges(self) -> list[tuple[str, str]]:
        """The data edges; none listed means a chain in node order (``Graph.load``)."""
        if self.edges:
            return list(self.edges)
        ids = self.node_ids
        return list(itertools.pairwise(ids))

    def built(self) -> BuiltPlan:
        """The plan document, parameters and ops a run of this bundle takes."""
        edges = self.graph_edges()
        try:
            plan = plan_of_graph(self.node_ids, edges)
        except BundleError as exc:
            raise BundleError(f"{self.source}: {exc}") from None
        document = load_plan_document(
            {"plan": plan, "predecessors": predecessors_of(self.node_ids, edges)}
        )
        params = {n.id: dict(n.kwargs) for n in self.nodes if n.kwargs}
        ops = {n.id: class_op(n.class_path, n.class_version) for n in self.nodes}
        return BuiltPlan(document, params, ops)


def is_bundle_path(value: Any) -> bool:
    """Whether ``value`` names a bundle file: a path ending in ``.zip``, or any zip file."""
    if isinstance(value, Path):
        return value.suffix == ".zip" or (value.is_file() and zipfile.is_zipfile(value))
    return (
        isinstance(value, str)
        and value.endswith(".zip")
        and "\n" not in value
        and not value.lstrip().startswith(("{", "["))
    )


def read_soma_bundle(path: str | Path) -> SomaBundle:
    """Read the bundle at ``path``; every problem is one :class:`BundleError` naming it."""
    source = str(path)
    try:
        with zipfile.ZipFile(path) as archive:
            manifest = _manifest(archive)
            nodes, edges = _topology(manifest)
            names = set(archive.namelist())
            states = {n.id: s for n in nodes if (s := _state(archive, names, n.id)) is not None}
    except FileNotFoundError:
        raise BundleError(f"bundle file {source!r} does not exist") from None
    except zipfile.BadZipFile as exc:
        raise BundleError(f"{source} is not a zip bundle: {exc}") from None
    except OSError as exc:
        raise BundleError(f"cannot read bundle {source!r}: {exc.strerror or exc}") from None
    except BundleError as exc:
        raise BundleError(f"{source}: {exc}") from None
    return SomaBundle(tuple(nodes), tuple(edges), states, source)


def write_soma_bundle(
    path: str | Path,
    nodes: Sequence[BundleNode],
    edges: Sequence[tuple[str, str]],
    states: Mapping[str, Any],
) -> None:
    """Write a bundle ``Graph.load`` reads; complete or not at all (a temporary name,
    renamed when done, so a full disk leaves no half file behind)."""
    final = Path(path)
    temp = final.with_name(f".{final.name}.{os.urandom(8).hex()}.tmp")
    manifest = {
        "soma_checkpoint_format": FORMAT_VERSION,
        "saved_at": dt.datetime.now(dt.UTC).isoformat(),
        "topology": {
            "nodes": [
                {
                    "id": n.id,
                    "class_path": n.class_path,
                    "class_version": n.class_version,
                    "kwargs": n.kwargs,
                }
                for n in nodes
            ],
            "edges": [{"source": s, "target": t} for s, t in edges],
        },
    }
    try:
        with zipfile.ZipFile(temp, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(MANIFEST, json.dumps(manifest, indent=2))
            for node_id, state in states.items():
                tensors, text = write_state(node_id, state)
                if tensors is not None:
                    archive.writestr(f"states/{node_id}.safetensors", tensors)
                if text is not None:
                    archive.writestr(f"states/{node_id}.json", text)
        os.replace(temp, final)
    except OSError as exc:
        raise BundleError(f"cannot write bundle {str(path)!r}: {exc.strerror or exc}") from None
    finally:
        temp.unlink(missing_ok=True)


def _manifest(archive: zipfile.ZipFile) -> dict[str, Any]:
    try:
        info = archive.getinfo(MANIFEST)
    except KeyError:
        raise BundleError(f"no {MANIFEST} in it (is it a Soma Graph.save bundle?)") from None
    if info.file_size > MAX_MANIFEST_BYTES:
        raise BundleError(
            f"{MANIFEST} is {info.file_size} bytes; the limit is {MAX_MANIFEST_BYTES}"
        )
    try:
        manifest = json.loads(archive.read(info).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(f"{MANIFEST} is not JSON: {exc}") from None
    if not isinstance(manifest, dict):
        raise BundleError(f"{MANIFEST} must be an object")
    version = manifest.get("soma_checkpoint_format", 0)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise BundleError(
            f"checkpoint format version {version!r} > supported {FORMAT_VERSION} "
            "(saved by a newer Soma)"
        )
    return manifest


def _topology(manifest: dict[str, Any]) -> tuple[list[BundleNode], list[tuple[str, str]]]:
    topology = manifest.get("topology")
    if not isinstance(topology, dict) or not isinstance(topology.get("nodes"), list):
        raise BundleError(f"{MANIFEST}: topology.nodes must be a list of nodes")
    nodes = [_node(raw, i) for i, raw in enumerate(topology["nodes"])]
    ids = [n.id for n in nodes]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise BundleError(f"{MANIFEST}: node id {twice[0]!r} is listed twice")
    raw_edges = topology.get("edges") or []
    if not isinstance(raw_edges, list):
        raise BundleError(f"{MANIFEST}: topology.edges must be a list")
    return nodes, [_edge(raw, i, set(ids)) for i, raw in enumerate(raw_edges)]


def _node(raw: Any, index: int) -> BundleNode:
    where = f"{MANIFEST}: topology.nodes[{index}]"
    if not isinstance(raw, dict):
        raise BundleError(f"{where} must be an object")
    node_id, path = raw.get("id"), raw.get("class_path")
    if not isinstance(node_id, str) or not node_id or "/" in node_id:
        raise BundleError(f"{where}.id must be a non-empty node id (no '/'), not {node_id!r}")
    if not isinstance(path, str) or "." not in path.strip("."):
        raise BundleError(f"{where}.class_path must be 'module.Class', not {path!r}")
    version = raw.get("class_version", 1)
    if isinstance(version, bool) or not isinstance(version, int):
        raise BundleError(f"{where}.class_version must be an int, not {version!r}")
    kwargs = raw.get("kwargs") or {}
    if not isinstance(kwargs, dict):
        raise BundleError(f"{where}.kwargs must be an object of keyword arguments")
    return BundleNode(node_id, path, version, kwargs)


def _edge(raw: Any, index: int, ids: set[str]) -> tuple[str, str]:
    where = f"{MANIFEST}: topology.edges[{index}]"
    if not isinstance(raw, dict):
        raise BundleError(f"{where} must be an object with source and target")
    ends = raw.get("source"), raw.get("target")
    for name, end in zip(("source", "target"), ends, strict=True):
        if end not in ids:
            raise BundleError(f"{where}.{name} {end!r} is not a node of the topology")
    return str(ends[0]), str(ends[1])


def _state(archive: zipfile.ZipFile, names: set[str], node_id: str) -> Any:
    tensors_name, json_name = f"states/{node_id}.safetensors", f"states/{node_id}.json"
    tensors = archive.read(tensors_name) if tensors_name in names else None
    text = archive.read(json_name) if json_name in names else None
    if tensors is None and text is None:
        return None
    return read_state(node_id, tensors, text)
