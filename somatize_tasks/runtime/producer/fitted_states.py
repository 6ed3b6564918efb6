"""Fitted states: kept by a fit run, used by forward runs, exported as a bundle.

A fit run keeps each trainable Filter's state in the shared store under the
run (``__state_<node>``) and lists them in Redis (``<p>:run:<id>:states``),
so a forward run can name the fit run (``states_from=RUN_ID``) while that
run is kept (``SOMATIZE_RUN_TTL_S``). To keep states longer, or move them
to another cluster, export them: a bundle is one JSON file,

    {"format": "somatize-states", "version": 1, "run_id": "...",
     "states": {"scale": {"codec": "npy", "data": "<base64>"}, ...}}

encoded by the same codecs as every value (JSON, npy, bytes; never pickle).
"""

from __future__ import annotations

import base64
import io
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scheduler.model.depth import MAX_JSON_DEPTH, text_too_deep
from somatize_tasks.config.connections import reaching_redis
from somatize_tasks.errors import CodecError, StatesError
from somatize_tasks.runtime.compile.values import Expr
from somatize_tasks.runtime.engine.context import RunContext
from somatize_tasks.store import key_part
from somatize_tasks.store.codecs import codec_for, codec_named

BUNDLE_FORMAT = "somatize-states"
BUNDLE_VERSION = 1


def encode_bundle(states: Mapping[str, Any], run_id: str | None = None) -> dict[str, Any]:
    """A states bundle (JSON-ready) holding ``states``, node id to value."""
    encoded = {}
    for node_id, value in states.items():
        codec = codec_for(value)
        buffer = io.BytesIO()
        codec.write(value, buffer)
        encoded[node_id] = {
            "codec": codec.name,
            "data": base64.b64encode(buffer.getvalue()).decode("ascii"),
        }
    return {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "run_id": run_id,
        "created_at": time.time(),
        "states": encoded,
    }


def decode_bundle(bundle: Any, source: str = "states bundle") -> dict[str, Any]:
    """The states in a bundle, node id to value; an error names what is wrong."""
    if not isinstance(bundle, dict) or bundle.get("format") != BUNDLE_FORMAT:
        raise StatesError(f'{source} is not a states bundle (no "format": "{BUNDLE_FORMAT}")')
    if bundle.get("version") != BUNDLE_VERSION:
        raise StatesError(
            f"{source} has version {bundle.get('version')!r}; this version reads {BUNDLE_VERSION}"
        )
    entries = bundle.get("states")
    if not isinstance(entries, dict):
        raise StatesError(f"{source}: 'states' must be an object of node ids")
    states = {}
    for node_id, entry in entries.items():
        try:
            raw = base64.b64decode(entry["data"], validate=True)
            states[node_id] = codec_named(entry["codec"]).read(io.BytesIO(raw))
        except (KeyError, TypeError, ValueError, CodecError) as exc:
            raise StatesError(
                f"{source}: the state of node {node_id!r} cannot be read: {exc}"
            ) from None
    return states


def write_bundle(path: str | Path, states: Mapping[str, Any], run_id: str | None = None) -> None:
    """Write the bundle under a temporary name, renamed when complete: a full disk
    leaves no half file behind, only a :class:`StatesError` naming the file."""
    final = Path(path)
    temp = final.with_name(f".{final.name}.{os.urandom(16).hex()}.tmp")
    try:
        temp.write_text(json.dumps(encode_bundle(states, run_id)))
        os.replace(temp, final)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise StatesError(f"cannot write states file {str(path)!r}: {exc.strerror}") from None


def read_bundle(path: str | Path) -> dict[str, Any]:
    """The states in the bundle file at ``path``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise StatesError(f"states file {str(path)!r} is not UTF-8 text: {exc.reason}") from None
    except OSError as exc:
        raise StatesError(f"cannot read states file {str(path)!r}: {exc.strerror}") from None
    if text_too_deep(text) is not None:
        raise StatesError(
            f"states file {str(path)!r} nests JSON more than {MAX_JSON_DEPTH} levels deep"
        )
    try:
        bundle = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StatesError(f"states file {str(path)!r} is not JSON: {exc}") from None
    return decode_bundle(bundle, f"states file {str(path)!r}")


def looks_like_file(states_from: str) -> bool:
    """A ``states_from`` naming an existing file (else it is taken as a run id)."""
    return Path(states_from).is_file()


StatesFrom = str | Path | Mapping[str, Any]


def states_to_use(
    context: RunContext, states_from: StatesFrom | None
) -> tuple[dict[str, Any], dict[str, Expr]]:
    """What a forward run's ``states_from`` names: values to store for the run (a dict
    or a states file), or refs already in the store (a fit run's id)."""
    if states_from is None:
        return {}, {}
    if isinstance(states_from, Mapping):
        return dict(states_from), {}
    if isinstance(states_from, Path) or looks_like_file(states_from):
        return read_bundle(states_from), {}
    return {}, _states_of_run(context, key_part("states_from run id", states_from))


def _states_of_run(context: RunContext, run_id: str) -> dict[str, Expr]:
    state = context.state(run_id)
    refs = reaching_redis(context.settings, state.fitted_states)
    if refs:
        return refs
    if reaching_redis(context.settings, state.status) is None:
        raise StatesError(
            f"states_from: run {run_id} is not in Redis (a wrong id, or it expired after "
            f"{context.settings.run_ttl_s} s); export a fit run's states while it is kept "
            "(somatize-tasks states export RUN_ID) and pass the file"
        )
    raise StatesError(f"states_from: run {run_id} kept no states (was it a fit run?)")
