"""``docs/settings.md``, rendered from :class:`Settings` so the page cannot drift from the code.

Why generated: the settings page used to be a hand-kept table in the README,
and a setting added to the class without a row (or a default changed under
it) went unnoticed. Here every row comes from the class itself: the
environment variable (the class's ``env_prefix`` and the field name), the type
with its bounds, and the default. A field's meaning comes from the field when
it has one (``Field(description=...)``, or a docstring right under it), else
from :data:`DESCRIPTIONS` (written as text here, since the class does not
carry them); a field with neither, or a computed default with no
word in :data:`DEFAULTS`, makes :func:`render` fail, and the test that compares
the page with :func:`render` fails with it. Regenerate the page with::

    python -m somatize_tasks.config.settings_doc > docs/settings.md
"""

from __future__ import annotations

import ast
import inspect
import itertools
import sys
import textwrap
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic import SecretStr
from pydantic.fields import FieldInfo

from somatize_tasks.config.settings import Settings

REGENERATE = "python -m somatize_tasks.config.settings_doc > docs/settings.md"

INTRO = f"""\
# Settings

<!-- Generated from somatize_tasks/config/settings.py: do not edit by hand.
     Regenerate with: {REGENERATE} -->

One `Settings` object holds everything a producer or a worker needs
(`somatize_tasks.Settings.from_env(**overrides)`). It reads the `SOMATIZE_*`
variables below when it is built, never at import, and keyword overrides win
over the environment. Producers, workers, Flower, the dashboard and every
`somatize-tasks` command read the same variables, so give every process of a
deployment the same values ([deploying on several machines](multi-host.md)).

- Lists are comma-separated (`SOMATIZE_WORKER_TAGS=gpu,training`); booleans
  are `true`/`false`.
- Passwords in URLs are never logged (`redacted_url` prints
  `redis://:***@host`), and secrets (`SOMATIZE_S3_SECRET_ACCESS_KEY`,
  `SOMATIZE_MESSAGE_KEY`) are never logged or shown.
- Bad values are refused when the object is built, with an error naming the
  variable: a Redis URL must be `redis://HOST:PORT/DB` (`rediss://` for TLS,
  `unix://` for a socket), a broker or backend URL needs a scheme, a message
  key needs at least 16 characters, and the heartbeat TTL must be longer than
  the interval. A malformed `SOMATIZE_REDIS_URL` is one `Error:` line for
  every command.
- The worker options of `somatize-tasks worker` are the same settings
  (`SOMATIZE_WORKER_ID`, `SOMATIZE_WORKER_TAGS`, ...), so
  `celery -A somatize_tasks worker` works too ([workers](workers.md)).

This page is generated from `somatize_tasks/config/settings.py`; a test fails
when it is out of date. Regenerate it with `{REGENERATE}`.
"""

#: What each setting means, for fields that do not say it themselves: ``name: text``,
#: continued on indented lines.
_DESCRIBED = """
redis_url: Redis for heartbeats, run state and (by default) Celery; `rediss://` (TLS) and
    `redis://:password@host` work
broker_url: Celery broker (RabbitMQ `amqp://` works too)
result_backend: Celery result backend
redis_ssl_cert_reqs: certificate check for `rediss://`
redis_ssl_ca_certs: CA bundle for `rediss://`
key_prefix: prefix of every Redis key (see `somatize_tasks/config/keys.py`); producers and
    workers must share it
visibility_timeout_s: seconds before an unacknowledged message is redelivered (broker transport
    option)
redis_retry_s: how long a node or `input_ready` task that lost its Redis connection waits for
    Redis to answer again before it gives up (it then does its work again); publishes and
    `PlanRun.wait` wait as long
message_key: shared secret (16+ characters) that signs every task message; workers with a key
    refuse unsigned or badly signed messages. Set the same key on producers and workers
    ([reliability](reliability.md#signed-messages))
message_keys_previous: older keys a worker still accepts (never signs with), for rotating the key
message_ttl_s: how long a signed task message may wait in its queue before workers refuse it;
    its id is kept in Redis that long so a replayed copy is refused (one small key a message)
control_ttl_s: how long a signed remote-control command (shutdown, revoke) stays valid; a worker
    acts on each one once, and on none after this ([reliability](reliability.md#signed-messages))
run_ttl_s: how long a finished run's state stays in Redis; its files, Celery results and index
    entry go with it (`run.forget()` drops them at once)
gc_interval_s: how often workers sweep their caches and the elected reaper collects expired runs
node_soft_time_limit_s: per-node soft time limit of runs this producer submits: the node gets
    `SoftTimeLimitExceeded` and the run fails naming it
node_time_limit_s: per-node hard time limit: the worker kills the node; the reaper fails the run
    naming it (a fused chain's task gets the limit times its node count)
reroute_grace_s: how long a node pinned to a dead worker (or needing a tag no live worker has)
    waits for it to come back before its run fails
max_node_deaths: a node whose worker (or worker process) died while running it this many times
    fails its run (`KilledWorkerError`) instead of being re-run again;
    `submit_plan(max_node_deaths=...)` overrides it per run
run_deadline_s: the deadline of every run submitted without one of its own: past it the run
    fails with `RunDeadlineError` (`submit_plan(deadline_s=...)` and `--deadline` override it)
run_max_passes: most loop passes one run may make, all its loops together: the pass past it
    fails the run (`RunBudgetError`) naming the loop; `submit_plan(max_passes=...)` overrides it
transfer_stall_s: a block waiting longer than this for its transfers is dispatched again
max_transfer_stalls: a block whose transfers never came this many times fails its run
reaper_enabled: whether workers stand for election as the cluster's reaper (they sweep their own
    caches either way)
fuse_chains: run consecutive same-worker Executes of a Sequence as one task
    ([performance](performance.md))
dispatch_batch_max: at most this many independent ready blocks of one worker in one message
reservation_ttl_s: how long slots placed for a run but not yet started count against a worker
heartbeat_interval_s: seconds between heartbeats
heartbeat_ttl_s: seconds after which a silent worker counts as dead (`0`: three intervals)
store_kind: shared store: `s3`, or `local` (a directory shared by the workers of one machine)
store_dir: the shared directory for `local`
cache_dir: worker-local caches, one subdirectory per worker id
inline_max_bytes: encoded values up to this size travel inline ("direct")
ram_dir: with the `local` store, larger values go here (RAM) while they fit
    ([performance](performance.md))
ram_max_bytes: most the RAM directory holds for one key prefix; `0` turns it off (values go to
    the caches on disk)
s3_endpoint_url: S3-compatible endpoint (MinIO, moto)
s3_bucket: bucket (it must exist)
s3_prefix: key prefix inside the bucket
s3_region: region
s3_access_key_id: access key
s3_secret_access_key: secret key (never logged or shown)
s3_multipart_threshold_bytes: values larger than this go multipart
s3_multipart_chunk_bytes: upload part size
s3_download_chunk_bytes: ranged download size
s3_max_concurrency: parallel parts per transfer
transfer_max_retries: retries of a transfer task when S3 is unreachable
transfer_retry_backoff_max_s: cap of the exponential backoff (1, 2, 4, ... s)
transfer: how a value made on one worker reaches another: `direct` (pulled from the worker
    that holds it), `s3` (up to the shared store and down), or `auto` (direct, and S3 whenever
    a direct pull fails) ([several machines](multi-host.md#direct-transfers))
serve_values: whether this worker serves the values in its cache to other workers (direct
    transfers need `SOMATIZE_MESSAGE_KEY` too: without a key nothing is served)
serve_bind: the address the value server listens on (`0.0.0.0`: every interface)
serve_port: its port (`0`: a free port, announced in the worker's heartbeat)
serve_address: the host other workers connect to (an address or name they can reach)
grant_ttl_s: how long a signed grant to pull one value stays valid
peer_timeout_s: connect and read timeout of a direct pull; past it the pull falls back to S3
worker_id: this worker's id (letters, digits, `-`, `_`)
worker_name: readable name in `WorkerInfo`
worker_tags: capability tags, e.g. `gpu,training`
max_concurrent: node slots advertised
gpu: `true`/`false` to override GPU detection
nodes: catalog modules imported at worker start
"""


def _parse(text: str) -> dict[str, str]:
    """``name: text`` entries, each continued on indented lines."""
    entries: dict[str, list[str]] = {}
    last: list[str] = []
    for line in text.strip().splitlines():
        if line.startswith(" "):
            last.append(line.strip())
        else:
            name, _, first = line.partition(":")
            last = entries[name.strip()] = [first.strip()]
    return {name: " ".join(words) for name, words in entries.items()}


DESCRIPTIONS: dict[str, str] = _parse(_DESCRIBED)

#: Defaults the class computes (or leaves to something else), in words.
DEFAULTS: dict[str, str] = {
    "broker_url": "the Redis URL",
    "result_backend": "the Redis URL",
    "redis_ssl_ca_certs": "system CAs",
    "message_key": "none (unsigned)",
    "heartbeat_ttl_s": "3 intervals",
    "store_dir": "`<tmp>/somatize-store`",
    "cache_dir": "`<tmp>/somatize-cache`",
    "s3_endpoint_url": "AWS",
    "s3_bucket": "none (required for `s3`)",
    "s3_access_key_id": "boto3's chain",
    "s3_secret_access_key": "boto3's chain",
    "worker_id": "the hostname, lowercased",
    "worker_name": "`<id>@<host>`",
    "max_concurrent": "pool concurrency",
    "gpu": "detected",
    "serve_address": "the address this host reaches Redis from",
}

_BOUNDS: tuple[tuple[type[Any], str, str], ...] = (
    (Gt, "gt", "> {}"),
    (Ge, "ge", "≥ {}"),
    (Lt, "lt", "< {}"),
    (Le, "le", "≤ {}"),
    (MinLen, "min_length", "at least {} characters"),
    (MaxLen, "max_length", "at most {} characters"),
)

_UNITS: dict[str, tuple[tuple[str, int], ...]] = {
    "_bytes": (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)),
    "_s": (("days", 86400),),
}


def env_name(name: str, model: type[Settings] = Settings) -> str:
    """The environment variable that sets field ``name``."""
    prefix = model.model_config.get("env_prefix", "")
    return f"{prefix}{name}".upper()


def field_docstrings(model: type[Settings] = Settings) -> dict[str, str]:
    """Docstrings written right under a field in the class body (or a base's), by field."""
    found: dict[str, str] = {}
    for cls in reversed([c for c in model.__mro__ if issubclass(c, Settings)]):
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in itertools.pairwise(body):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                found[node.target.id] = " ".join(after.value.value.split())
    return found


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(arg) for arg in args if arg is not type(None))
    if origin is Literal:
        return "one of " + ", ".join(f"`{arg}`" for arg in args)
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if annotation is SecretStr:
        return "secret"
    if annotation is Path:
        return "path"
    return str(getattr(annotation, "__name__", annotation))


def _unit(name: str, value: int) -> str | None:
    """``value`` in a larger unit, when the field counts bytes or seconds and it divides."""
    for suffix, sizes in _UNITS.items():
        for unit, size in sizes if name.endswith(suffix) else ():
            if value >= size and value % size == 0:
                return f"{value // size} {unit}"
    return None


def _bounds(name: str, annotation: Any, metadata: list[Any]) -> list[str]:
    """The constraints on a field's value, in words, wherever the annotation keeps them."""
    found = list(metadata)
    for arg in typing.get_args(annotation):
        if typing.get_origin(arg) is typing.Annotated:
            for extra in typing.get_args(arg)[1:]:
                found.extend(extra.metadata if isinstance(extra, FieldInfo) else [extra])
    words = []
    for item in found:
        for kind, attribute, text in _BOUNDS:
            if not isinstance(item, kind):
                continue
            bound = getattr(item, attribute)
            if kind is MinLen and bound == 1:
                words.append("not empty")
            elif isinstance(bound, int):
                words.append(text.format(_unit(name, bound) or bound))
            else:
                words.append(text.format(bound))
        pattern = getattr(item, "pattern", None)
        if isinstance(pattern, str):
            words.append(f"matching `{pattern}`")
    return words


def type_of(name: str, field: FieldInfo) -> str:
    """A field's type as the page shows it: the type, then its bounds."""
    bounds = _bounds(name, field.annotation, field.metadata)
    return ", ".join([_type_name(field.annotation), *bounds])


def default_of(name: str, field: FieldInfo) -> str:
    """A field's default as the page shows it; computed ones from :data:`DEFAULTS`."""
    if name in DEFAULTS:
        return DEFAULTS[name]
    if field.default_factory is list:
        return "none"
    if field.default_factory is not None:
        raise ValueError(f"setting {name!r} has a computed default: describe it in {__name__}")
    value = field.default
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    if isinstance(value, int):
        in_unit = _unit(name, value)
        return f"`{value}` ({in_unit})" if in_unit else f"`{value}`"
    return f"`{value}`"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def render(model: type[Settings] = Settings) -> str:
    """The whole settings page: the intro, then one table row per field, in class order."""
    fields = model.model_fields
    stale = sorted(set(DESCRIPTIONS) - set(fields))
    if stale:
        raise ValueError(f"{__name__} describes settings that do not exist: {stale}")
    docstrings = field_docstrings(model)
    rows = ["| Environment variable | Type | Default | Meaning |", "| --- | --- | --- | --- |"]
    for name, field in fields.items():
        meaning = field.description or docstrings.get(name) or DESCRIPTIONS.get(name)
        if not meaning:
            raise ValueError(
                f"setting {name!r} has no description: give it Field(description=...) or a "
                f"docstring in {model.__module__}, then run: {REGENERATE}"
            )
        variable = f"`{env_name(name, model)}`"
        rows.append(_row([variable, type_of(name, field), default_of(name, field), meaning]))
    return INTRO + "\n" + "\n".join(rows) + "\n"


def main() -> None:
    """Print the page: ``python -m somatize_tasks.config.settings_doc > docs/settings.md``."""
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
