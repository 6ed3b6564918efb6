"""The Celery app factory: JSON only, events on, one settings object per app.

Worker start-up (own queue, node name, catalog) is in
:mod:`somatize_tasks.workers.boot`; heartbeats in :mod:`somatize_tasks.workers.heartbeat`.

``create_app(settings)`` returns an app bound to those settings;
``somatize_tasks.app`` is a default app whose settings are read from the
environment the first time its configuration is needed (never at import),
which is what ``celery -A somatize_tasks worker`` uses. Tasks reach their
settings through :func:`settings_of`.
"""

from __future__ import annotations

import ssl
import uuid
from typing import Any

from celery import Celery
from celery.app.amqp import AMQP
from kombu import Connection

from somatize_tasks.config.clock import settings_now
from somatize_tasks.config.settings import Settings
from somatize_tasks.messaging.kombu_publish import reuse_publish_clients
from somatize_tasks.messaging.signing import (
    HEADER,
    MESSAGE,
    SIGNED,
    SIGNED_HEADERS,
    sign,
    sign2,
    signing_key,
)

#: Worker bootsteps, by path so this module need not import them (they import it).
WORKER_STEPS = (
    "somatize_tasks.workers.heartbeat:HeartbeatStep",
    "somatize_tasks.runtime.recovery.elected:ReaperStep",
)
#: Consumer bootsteps (run each time the consumer connects to the broker).
CONSUMER_STEPS = ("somatize_tasks.messaging.kombu_compat:RestoreAfterReconnect",)
TASK_MODULES = (
    "somatize_tasks.transfer.tasks",
    "somatize_tasks.runtime.worker.tasks",
    "somatize_tasks.runtime.worker.pulls",
)

_SSL_CERT_REQS = {
    "required": ssl.CERT_REQUIRED,
    "optional": ssl.CERT_OPTIONAL,
    "none": ssl.CERT_NONE,
}


class HonestConnection(Connection):
    """A broker connection whose printed URL masks a password only when there is one.

    kombu prints ``redis://:**@host`` for a URL without any password, which
    reads as if one were set; Celery's banner and "Connected to" log use it.
    """

    def as_uri(
        self, include_password: bool = False, mask: str = "**", getfields: Any = None
    ) -> str:
        if getfields is None:
            uri = str(super().as_uri(include_password, mask))
        else:
            uri = str(super().as_uri(include_password, mask, getfields))
        if not include_password and not self.password:
            uri = uri.replace(f":{mask}@", "@", 1).replace("://@", "://", 1)
        return uri


#: Headers every publish computes (and signs) itself: never taken from a caller's extras.
_OWN_HEADERS = frozenset({HEADER, SIGNED, *SIGNED_HEADERS})


class ShadowNamedAMQP(AMQP):
    """Task messages that are signed, and whose ``task-sent`` event carries the shadow name.

    Every task message this app publishes (``send_task``, ``apply_async``,
    a chain's next step, an errback, a retry) is built here, so this is the
    one place that signs them (:mod:`somatize_tasks.messaging.signing`) when the app's
    settings have a message key.

    Celery names a message by its ``shadow`` in the worker's events but by
    the task in the producer's ``task-sent``; a sent event that reaches
    Flower after the received one would rename ``node:train_svm`` back to
    ``somatize.node.run``. Routing still uses the task name in the headers.
    """

    Connection = HonestConnection

    def as_task_v2(self, task_id: str, name: str, *args: Any, **kwargs: Any) -> Any:
        message = super().as_task_v2(task_id, name, *args, **kwargs)
        settings = settings_of(self.app)
        key = signing_key(settings)
        if key is not None:
            headers = message.headers
            # Its expiry is judged on Redis' clock (messaging.replay): stamped with it.
            expires = settings_now(settings) + settings.message_ttl_s
            headers[MESSAGE] = {"id": uuid.uuid4().hex, "exp": expires}
            headers[HEADER] = sign(key, name, task_id, message.body)  # workers before v2
            headers[SIGNED] = sign2(key, name, task_id, message.body, headers)
        shadow = message.headers.get("shadow")
        if shadow and message.sent_event is not None:
            message.sent_event["name"] = shadow
        return message

    def _create_task_sender(self) -> Any:
        """Celery's sender, minus what would undo a signature: a retry republishes the
        request's old headers as "extra" headers, applied over the new message's, so its
        old signature, message id, retry count and ETA came back over the fresh ones and
        every signed retry was refused. The message's own are kept; other extras pass."""
        send = super()._create_task_sender()  # type: ignore[misc]  # untyped in the stubs

        def send_task_message(*args: Any, headers: Any = None, **kwargs: Any) -> Any:
            if headers:
                headers = {k: v for k, v in headers.items() if k not in _OWN_HEADERS}
            return send(*args, headers=headers, **kwargs)

        return send_task_message


class SomatizeCelery(Celery):
    """A Celery app that carries its :class:`Settings` (built lazily if not given)."""

    amqp_cls = f"{__name__}:ShadowNamedAMQP"
    control_cls = "somatize_tasks.messaging.signed_control:SignedControl"

    def __init__(self, settings: Settings | None = None, **kwargs: Any) -> None:
        super().__init__("somatize_tasks", **kwargs)
        reuse_publish_clients()  # a publish no longer builds a Redis client (kombu_publish)
        self._somatize_settings = settings
        self.add_defaults(lambda: celery_config(self.somatize_settings))
        self.steps["worker"].update(WORKER_STEPS)
        self.steps["consumer"].update(CONSUMER_STEPS)

    @property
    def somatize_settings(self) -> Settings:
        """The app's settings; the default app reads ``SOMATIZE_*`` on first use."""
        if self._somatize_settings is None:
            self._somatize_settings = Settings.from_env()
        return self._somatize_settings

    def use_settings(self, settings: Settings) -> None:
        """Bind ``settings`` before the app is configured (the worker CLI does this)."""
        if getattr(self, "configured", False) and settings is not self._somatize_settings:
            raise RuntimeError("the app is already configured; bind settings before using it")
        self._somatize_settings = settings


def _ssl_options(settings: Settings) -> dict[str, Any]:
    options: dict[str, Any] = {"ssl_cert_reqs": _SSL_CERT_REQS[settings.redis_ssl_cert_reqs]}
    if settings.redis_ssl_ca_certs is not None:
        options["ssl_ca_certs"] = str(settings.redis_ssl_ca_certs)
    return options


def celery_config(settings: Settings) -> dict[str, Any]:
    """The Celery configuration the settings imply.

    ``task_acks_late`` with ``task_reject_on_worker_lost`` makes a node whose
    worker dies go back to the broker instead of vanishing; prefetch 1 keeps
    a worker from hoarding messages another worker could run.
    """
    transport = {"visibility_timeout": settings.visibility_timeout_s}
    config: dict[str, Any] = {
        "broker_url": settings.broker,
        "result_backend": settings.backend,
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "task_serializer": "json",
        "result_serializer": "json",
        "event_serializer": "json",
        "worker_send_task_events": True,
        "task_send_sent_event": True,
        "task_track_started": True,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        # Malformed and unsigned messages are dropped with one log line, never fatal.
        "worker_consumer": "somatize_tasks.messaging.message_guard:GuardedConsumer",
        "broker_transport_options": transport,
        "result_backend_transport_options": transport,
        "broker_connection_retry_on_startup": True,
        # A publish that meets a Redis restart (a chain's next transfer step, an
        # errback) waits for it as tasks do, instead of giving up after 0.6 s.
        "task_publish_retry_policy": publish_retry_policy(settings.redis_retry_s),
        "result_extended": True,
        # Task results end with the run state they belong to (nothing unbounded).
        "result_expires": settings.run_ttl_s,
        "include": list(TASK_MODULES),
    }
    if settings.broker.startswith("rediss://"):
        config["broker_use_ssl"] = _ssl_options(settings)
    if settings.backend.startswith("rediss://"):
        config["redis_backend_use_ssl"] = _ssl_options(settings)
    return config


def publish_retry_policy(retry_s: float) -> dict[str, float]:
    """kombu's retry policy for publishing: pauses of 0.5 s growing by 0.5 s to 5 s,
    as many as add up to at least ``retry_s`` (Celery's default gives up after
    three tries in 0.6 s, so a chain step published during a Redis restart was
    lost and its block waited for ``transfer_stall_s``)."""
    pauses, waited = 0, 0.0
    while waited < retry_s:
        pauses += 1
        waited += min(0.5 * pauses, 5.0)
    return {
        "max_retries": max(pauses, 3),
        "interval_start": 0.5,
        "interval_step": 0.5,
        "interval_max": 5.0,
    }


def create_app(settings: Settings | None = None) -> SomatizeCelery:
    """A new app bound to ``settings`` (or to the environment, read lazily)."""
    return SomatizeCelery(settings)


def settings_of(app: Celery) -> Settings:
    """The settings of a somatize app; tasks call this with ``self.app``."""
    if not isinstance(app, SomatizeCelery):
        raise TypeError(f"{app!r} is not a somatize_tasks app; build it with create_app()")
    return app.somatize_settings
