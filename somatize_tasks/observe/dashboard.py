"""``somatize-tasks dashboard``: a live page of the cluster, served by tornado.

Why tornado: it already comes with Flower (a dependency), it is well kept,
and a dashboard needs no more than a few JSON handlers and one page. The
page (:mod:`somatize_tasks.observe.dashboard_page`) is self-contained, no CDN, and
polls these endpoints about once a second:

- ``GET /api/workers``: the live workers with their slots;
- ``GET /api/runs``: the newest runs with state and progress (one Redis
  round trip for all of them);
- ``GET /api/runs/<id>``: one run's state, error and nodes;
- ``GET /api/runs/<id>/timeline.svg``: its timeline, drawn now.

Like Flower, it binds to 127.0.0.1 by default; bound anywhere else it
refuses to start without credentials (``SOMATIZE_DASHBOARD_AUTH`` or
``--basic-auth-file``, never the command line), and with them it answers
nothing without them. It answers only requests whose ``Host`` it is served
under, and error pages carry no traceback
(:mod:`somatize_tasks.observe.dashboard_access`).

When Redis does not answer, every endpoint says so (``503`` with
``{"error": "Redis unreachable at ..."}``, which the page shows) and the
server logs one line a minute at most (:class:`OutageNote`), never a
traceback per request; it goes on as soon as Redis answers again.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

from redis import Redis
from redis.exceptions import RedisError
from tornado.log import access_log
from tornado.web import Application, HTTPError, RequestHandler

from somatize_tasks.config.clock import redis_now
from somatize_tasks.config.connections import redis_client
from somatize_tasks.config.keys import RedisKeys
from somatize_tasks.config.settings import Settings, redacted_url
from somatize_tasks.errors import RedisUnreachableError, RunError
from somatize_tasks.observe.dashboard_access import HostCheck
from somatize_tasks.observe.dashboard_page import PAGE
from somatize_tasks.observe.run_record import read_run
from somatize_tasks.observe.timeline import timeline_svg
from somatize_tasks.store import key_part
from somatize_tasks.workers.registry import Registry

RUNS_SHOWN = 50
LOOPBACK = ("127.0.0.1", "localhost", "::1")
#: While Redis does not answer, the server notes it at most this often.
OUTAGE_NOTE_EVERY_S = 60.0
log = logging.getLogger(__name__)


class OutageNote:
    """What the server says while Redis does not answer: the page's error text, and one
    log line a minute at most (and one when Redis answers again)."""

    def __init__(self, url: str, every_s: float = OUTAGE_NOTE_EVERY_S) -> None:
        self.url = redacted_url(url)
        self.every_s = every_s
        self.down = False
        self._last = -every_s
        self._lock = threading.Lock()

    def text(self, exc: BaseException) -> str:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"Redis unreachable at {self.url}: {reason}"

    def failed(self, exc: BaseException) -> str:
        message = self.text(exc)
        with self._lock:
            self.down = True
            now = time.monotonic()
            if now - self._last >= self.every_s:
                self._last = now
                log.warning("%s (the page says so; noted once a minute at most)", message)
        return message

    def answered(self) -> None:
        with self._lock:
            if self.down:
                self.down = False
                self._last = -self.every_s
                log.warning("Redis at %s answers again", self.url)


class Base(RequestHandler):
    """Basic auth (when configured) and JSON replies, for every handler."""

    def initialize(
        self,
        settings: Settings,
        client: Redis[bytes],
        credentials: tuple[str, str] | None,
        outage: OutageNote,
        hosts: HostCheck | None = None,
    ) -> None:
        self.somatize = settings
        self.client = client
        self.credentials = credentials
        self.outage = outage
        self.hosts = hosts or HostCheck()
        self.redis_down = False

    @contextlib.contextmanager
    def reading_redis(self) -> Iterator[None]:
        """Run the handler's body; Redis not answering is a 503 naming it, not a traceback."""
        try:
            yield
        except (RedisError, RedisUnreachableError) as exc:
            self.redis_down = True
            self.set_status(503)
            self.reply({"error": self.outage.failed(exc)})
        else:
            self.outage.answered()

    def prepare(self) -> None:
        if not self.hosts.allows(self.request.host):  # DNS rebinding (dashboard_access)
            raise HTTPError(400, reason="this dashboard is not served under that Host name")
        if self.credentials is None:
            return
        header = self.request.headers.get("Authorization", "")
        try:
            given = base64.b64decode(header.removeprefix("Basic "), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            given = ""
        expected = ":".join(self.credentials)
        if not header.startswith("Basic ") or not hmac.compare_digest(given, expected):
            self.set_header("WWW-Authenticate", 'Basic realm="somatize-tasks"')
            raise HTTPError(401)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """The status and its reason, never a traceback (tornado logs that)."""
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish(f"{status_code}: {self._reason}\n")

    def reply(self, value: Any) -> None:
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(value, default=str))


class PageHandler(Base):
    def get(self) -> None:
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(PAGE)


class WorkersHandler(Base):
    def get(self) -> None:
        with self.reading_redis():
            live = Registry.from_settings(self.somatize, self.client).live()
            self.reply(
                [{**w.info.model_dump(mode="json"), "age_s": round(w.age_s, 1)} for w in live]
            )


class RunsHandler(Base):
    def get(self) -> None:
        with self.reading_redis():
            self.reply(list_runs(self.client, RedisKeys(self.somatize.key_prefix)))


class RunHandler(Base):
    def get(self, run_id: str) -> None:
        with self.reading_redis():
            self._reply(run_id)

    def _reply(self, run_id: str) -> None:
        status = _record(self, run_id).status
        self.reply(
            {
                "run_id": status.run_id,
                "state": status.state,
                "error": without_traceback(status.error),
                "done": status.done,
                "total": len(status.nodes),
                "nodes": {
                    n: {"state": s.state, "worker": s.worker, "error": s.error}
                    for n, s in status.nodes.items()
                },
            }
        )


class TimelineHandler(Base):
    def get(self, run_id: str) -> None:
        with self.reading_redis():
            self._draw(run_id)

    def _draw(self, run_id: str) -> None:
        record = _record(self, run_id)
        self.set_header("Content-Type", "image/svg+xml")
        self.set_header("Cache-Control", "no-store")
        now = redis_now(self.client)  # the clock the run's times are on (config.clock)
        self.finish(timeline_svg(record.status, now=now, history=record.history))


def _record(handler: Base, run_id: str) -> Any:
    try:
        key_part("run id", run_id)
        return read_run(handler.somatize, run_id, handler.client)
    except RedisUnreachableError:
        raise
    except (RunError, ValueError) as exc:
        raise HTTPError(404, reason=str(exc).splitlines()[0][:200]) from None


def list_runs(
    client: Redis[bytes], keys: RedisKeys, limit: int = RUNS_SHOWN
) -> list[dict[str, Any]]:
    """The newest runs, newest first: state, progress, times and error, in one round trip."""
    return runs_page(client, keys, 0, limit)[0]


def runs_page(
    client: Redis[bytes], keys: RedisKeys, start: int, count: int
) -> tuple[list[dict[str, Any]], bool]:
    """Runs ``start`` to ``start + count`` of the index, newest first (expired ones left
    out), and whether the index holds more after them."""
    run_ids = [r.decode() for r in client.zrevrange(keys.runs, start, start + count - 1)]
    pipe = client.pipeline(transaction=False)
    for run_id in run_ids:
        pipe.hmget(keys.run(run_id), ["status", "node_count", "created_at", "finished_at", "error"])
        pipe.scard(keys.run(run_id, "done"))
    answers = pipe.execute()
    runs = []
    for index, run_id in enumerate(run_ids):
        (state, total, created, finished, error), done = answers[2 * index : 2 * index + 2]
        if state is None:
            continue  # expired: its id lingers in the index a while
        runs.append(
            {
                "run_id": run_id,
                "state": state.decode(),
                "done": int(done),
                "total": int(total or 0),
                "created_at": float(created or 0),
                "finished_at": float(finished) if finished else None,
                "error": without_traceback(json.loads(error)) if error else None,
            }
        )
    return runs, len(run_ids) == count


def without_traceback(error: Any) -> Any:
    """A run's error as the page shows it: its node, worker, type and message, not the
    worker's traceback (file paths and code are for ``somatize-tasks status``)."""
    if isinstance(error, dict):
        return {k: v for k, v in error.items() if k != "traceback"}
    return error


def make_app(
    settings: Settings,
    credentials: tuple[str, str] | None,
    outage: OutageNote | None = None,
    hosts: HostCheck | None = None,
) -> Application:
    args = {
        "settings": settings,
        "client": redis_client(settings, socket_connect_timeout=2.0, socket_timeout=5.0),
        "credentials": credentials,
        "outage": outage or OutageNote(settings.redis_url),
        "hosts": hosts or HostCheck(),
    }
    return Application(
        [
            (r"/", PageHandler, args),
            (r"/api/workers", WorkersHandler, args),
            (r"/api/runs", RunsHandler, args),
            (r"/api/runs/([^/]+)", RunHandler, args),
            (r"/api/runs/([^/]+)/timeline\.svg", TimelineHandler, args),
        ],
        log_function=log_request,
    )


def log_request(handler: RequestHandler) -> None:
    """Tornado's access log, but silent for the 503s of a Redis outage (the outage is
    noted once a minute instead: a page polling every second would log each one)."""
    if getattr(handler, "redis_down", False):
        return
    status = handler.get_status()
    method = access_log.info if status < 400 else access_log.warning
    if status >= 500:
        method = access_log.error
    took_ms = 1000.0 * handler.request.request_time()
    method("%d %s %.2fms", status, handler._request_summary(), took_ms)


def redis_answers(settings: Settings) -> str | None:
    """None when Redis answers; else the one line saying it does not (as the page says)."""
    try:
        redis_client(settings, socket_connect_timeout=2.0, socket_timeout=2.0).ping()
    except RedisError as exc:
        return OutageNote(settings.redis_url).text(exc)
    return None


def parse_credentials(value: str | None, address: str) -> tuple[str, str] | None:
    """``user:password`` (``dashboard_access.read_credentials``); required when bound
    beyond loopback."""
    if value is None:
        if address not in LOOPBACK:
            raise ValueError(
                f"binding the dashboard to {address} makes it reachable from other machines: "
                "put USER:PASSWORD in SOMATIZE_DASHBOARD_AUTH or in a file given with "
                "--basic-auth-file"
            )
        return None
    user, sep, password = value.partition(":")
    if not sep or not user or not password:
        raise ValueError("the dashboard's credentials must be USER:PASSWORD, both non-empty")
    return user, password
