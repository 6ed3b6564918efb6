"""One settings object for the whole layer, built once and passed down.

Nothing here reads the environment at import time: :meth:`Settings.from_env`
(or ``Settings()``) reads ``SOMATIZE_*`` variables when it is called, and
keyword overrides win over the environment. docs/settings.md (generated from this class)
lists every field with its environment name.
"""

from __future__ import annotations

import re
import socket
import tempfile
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

StoreKind = Literal["local", "s3"]
TransferMode = Literal["direct", "s3", "auto"]
CommaList = Annotated[list[str], NoDecode]
CommaSecrets = Annotated[list[SecretStr], NoDecode]
#: A message key shorter than this is refused: it could be guessed.
MESSAGE_KEY_MIN_CHARS = 16

_ID_UNSAFE = re.compile(r"[^a-z0-9_-]+")


def machine_worker_id() -> str:
    """A stable worker id for this machine: its hostname, lowercased and made key-safe."""
    host = socket.gethostname().split(".")[0].lower()
    return _ID_UNSAFE.sub("-", host).strip("-")[:64] or "worker"


def redacted_url(url: str) -> str:
    """``url`` with any password replaced by ``***``: the only form fit for logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


_REDIS_SCHEMES = ("redis", "rediss", "unix")


def _shown(value: str) -> str:
    """A malformed URL fit for an error message: anything before an ``@`` masked."""
    return "***@" + value.rsplit("@", 1)[1] if "@" in value else value


def _split_commas(value: Any) -> Any:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


class Settings(BaseSettings):
    """Everything a producer or a worker needs to know, from ``SOMATIZE_*`` or arguments.

    Broker and result backend default to ``redis_url``; read the effective
    values from :attr:`broker` and :attr:`backend`. Heartbeats expire after
    :attr:`heartbeat_ttl_s` (three intervals unless set).
    """

    model_config = SettingsConfigDict(
        env_prefix="SOMATIZE_",
        extra="forbid",
        validate_default=True,
        hide_input_in_errors=True,  # an error must never print a secret it was given
    )

    # Redis and Celery
    redis_url: str = "redis://127.0.0.1:6379/0"
    broker_url: str | None = None
    result_backend: str | None = None
    redis_ssl_cert_reqs: Literal["required", "optional", "none"] = "required"
    redis_ssl_ca_certs: Path | None = None
    key_prefix: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.:-]+$")] = "somatize"
    visibility_timeout_s: Annotated[float, Field(gt=0)] = 3600.0
    redis_retry_s: Annotated[float, Field(ge=0)] = 60.0

    # Signed messages (see somatize_tasks.messaging.signing)
    message_key: SecretStr | None = None
    message_keys_previous: CommaSecrets = Field(default_factory=list)
    #: How long a signed task message may wait in its queue before workers refuse it
    #: (its id is remembered that long, to refuse replays); control commands: seconds.
    message_ttl_s: Annotated[int, Field(ge=60)] = 24 * 3600
    control_ttl_s: Annotated[float, Field(gt=0)] = 60.0

    # Runs
    run_ttl_s: Annotated[int, Field(ge=1)] = 7 * 24 * 3600
    gc_interval_s: Annotated[float, Field(gt=0)] = 60.0
    node_soft_time_limit_s: Annotated[float, Field(gt=0)] | None = None
    node_time_limit_s: Annotated[float, Field(gt=0)] | None = None
    reroute_grace_s: Annotated[float, Field(ge=0)] = 30.0
    max_node_deaths: Annotated[int, Field(ge=1)] = 3
    run_deadline_s: Annotated[float, Field(gt=0)] | None = None
    run_max_passes: Annotated[int, Field(ge=1)] | None = None
    transfer_stall_s: Annotated[float, Field(gt=0)] = 60.0
    max_transfer_stalls: Annotated[int, Field(ge=1)] = 3
    reaper_enabled: bool = True
    fuse_chains: bool = True
    dispatch_batch_max: Annotated[int, Field(ge=1)] = 64
    reservation_ttl_s: Annotated[float, Field(gt=0)] = 120.0
    content_cache: bool = True
    """whether runs use the content-addressed cache every worker shares (a run may say
    `cache="off"`; [the content cache](cache-and-studies.md))"""

    # Heartbeats
    heartbeat_interval_s: Annotated[float, Field(gt=0)] = 2.0
    heartbeat_ttl_s: Annotated[float, Field(ge=0)] = 0.0

    # Artifact store
    store_kind: StoreKind = "local"
    store_dir: Path = Field(default_factory=lambda: Path(tempfile.gettempdir()) / "somatize-store")
    cache_dir: Path = Field(default_factory=lambda: Path(tempfile.gettempdir()) / "somatize-cache")
    inline_max_bytes: Annotated[int, Field(ge=0)] = 64 * 1024
    # With a shared directory, larger values go to RAM (tmpfs) while they fit this budget
    # (0 turns it off); see somatize_tasks/store/ram.py.
    ram_dir: Path = Path("/dev/shm/somatize")
    ram_max_bytes: Annotated[int, Field(ge=0)] = 2 * 1024 * 1024 * 1024
    s3_endpoint_url: str | None = None
    s3_bucket: str | None = None
    s3_prefix: str = "somatize"
    s3_region: str = "us-east-1"
    s3_access_key_id: str | None = None
    s3_secret_access_key: SecretStr | None = None
    s3_multipart_threshold_bytes: Annotated[int, Field(ge=5 * 1024 * 1024)] = 8 * 1024 * 1024
    s3_multipart_chunk_bytes: Annotated[int, Field(ge=5 * 1024 * 1024)] = 8 * 1024 * 1024
    s3_download_chunk_bytes: Annotated[int, Field(ge=1024 * 1024)] = 32 * 1024 * 1024
    s3_max_concurrency: Annotated[int, Field(ge=1)] = 10
    transfer_max_retries: Annotated[int, Field(ge=0)] = 5
    transfer_retry_backoff_max_s: Annotated[float, Field(gt=0)] = 30.0

    # Direct transfers: workers serve values to each other (somatize_tasks/transfer/peer*.py)
    transfer: TransferMode = "auto"
    serve_values: bool = True
    serve_bind: str = "0.0.0.0"
    serve_port: Annotated[int, Field(ge=0, le=65535)] = 0
    serve_address: str | None = None
    grant_ttl_s: Annotated[float, Field(gt=0)] = 60.0
    peer_timeout_s: Annotated[float, Field(gt=0)] = 10.0

    # This worker (read by `celery -A somatize_tasks worker` and `somatize-tasks worker`)
    worker_id: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")] = (
        Field(default_factory=machine_worker_id)
    )
    worker_name: str | None = None
    worker_tags: CommaList = Field(default_factory=list)
    max_concurrent: Annotated[int | None, Field(ge=1)] = None
    gpu: bool | None = None
    nodes: CommaList = Field(default_factory=list)
    allowed_modules: CommaList = Field(default_factory=list)
    """module prefixes whose classes a Soma bundle's class_path may name here
    (comma-separated; a prefix allows its submodules); empty: none"""

    @classmethod
    def from_env(cls, **overrides: Any) -> Settings:
        """Settings from ``SOMATIZE_*`` variables, with ``overrides`` taking precedence."""
        return cls(**overrides)

    @field_validator(
        "worker_tags", "nodes", "message_keys_previous", "allowed_modules", mode="before"
    )
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        return _split_commas(value)

    @field_validator("message_key", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("message_key", "message_keys_previous")
    @classmethod
    def _long_enough(cls, value: Any) -> Any:
        keys = value if isinstance(value, list) else [value]
        if any(k is not None and len(k.get_secret_value()) < MESSAGE_KEY_MIN_CHARS for k in keys):
            raise ValueError(
                f"a message key needs at least {MESSAGE_KEY_MIN_CHARS} characters; "
                "generate one with: python -c 'import secrets; print(secrets.token_hex(32))'"
            )
        return value

    @model_validator(mode="after")
    def _default_ttl(self) -> Settings:
        # 0 means "three intervals": a heartbeat may be missed twice before
        # the worker counts as dead.
        if self.heartbeat_ttl_s == 0:
            self.heartbeat_ttl_s = 3.0 * self.heartbeat_interval_s
        elif self.heartbeat_ttl_s <= self.heartbeat_interval_s:
            raise ValueError(
                "heartbeat_ttl_s must be longer than heartbeat_interval_s, "
                "or a live worker would flicker out between heartbeats"
            )
        return self

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: str) -> str:
        parts = urlsplit(value)
        try:
            port_ok = parts.port is None or parts.port > 0
        except ValueError:
            port_ok = False
        db = parts.path.strip("/")
        if (
            parts.scheme not in _REDIS_SCHEMES
            or "://" not in value
            or not port_ok
            or (parts.scheme != "unix" and db and not db.isdigit())
        ):
            raise ValueError(
                f"{_shown(value)!r} is not a Redis URL; write it as redis://HOST:PORT/DB "
                "(for example redis://localhost:6379/0; rediss:// for TLS, unix:// for a socket)"
            )
        return value

    @field_validator("broker_url", "result_backend")
    @classmethod
    def _has_scheme(cls, value: str | None) -> str | None:
        if value is not None and "://" not in value:
            raise ValueError(
                f"{_shown(value)!r} is not a URL; it needs a scheme, such as "
                "redis://localhost:6379/0 or amqp://guest@localhost//"
            )
        return value

    @field_validator("s3_prefix")
    @classmethod
    def _strip_slashes(cls, value: str) -> str:
        return value.strip("/")

    @property
    def broker(self) -> str:
        """The effective broker URL (``broker_url``, else ``redis_url``)."""
        return self.broker_url or self.redis_url

    @property
    def backend(self) -> str:
        """The effective result backend URL (``result_backend``, else ``redis_url``)."""
        return self.result_backend or self.redis_url

    @property
    def worker_display_name(self) -> str:
        """The worker's readable name: ``worker_name``, else its Celery node name."""
        return self.worker_name or f"{self.worker_id}@{socket.gethostname()}"

    def to_env(self) -> dict[str, str]:
        """The ``SOMATIZE_*`` variables that rebuild these settings in another process.

        Contains the S3 secret in clear: pass it to a child's environment,
        never to a log.
        """
        env: dict[str, str] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            elif isinstance(value, list):
                value = ",".join(
                    v.get_secret_value() if isinstance(v, SecretStr) else v for v in value
                )
            elif isinstance(value, bool):
                value = "true" if value else "false"
            env[f"SOMATIZE_{name.upper()}"] = str(value)
        return env

    def redacted(self) -> dict[str, Any]:
        """The settings as a dict safe to log: passwords in URLs and secrets masked."""
        data = self.model_dump(mode="json")
        for field in ("redis_url", "broker_url", "result_backend", "s3_endpoint_url"):
            if data.get(field):
                data[field] = redacted_url(data[field])
        for secret in ("s3_secret_access_key", "message_key"):
            if getattr(self, secret) is not None:
                data[secret] = "***"
        data["message_keys_previous"] = ["***" for _ in self.message_keys_previous]
        return data
