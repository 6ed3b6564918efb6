"""``somatize-tasks dashboard`` in a real headless browser (Debian's chromium via Selenium).

A run on real workers appears in the page, its bars grow while it runs, and
a failed node shows red with its message. The server is the real command;
the browser fetches nothing but the dashboard (the page is self-contained).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from somatize_tasks import submit_plan
from somatize_tasks.config.settings import Settings
from somatize_tasks.errors import NodeFailedError
from somatize_tasks.observe.timeline import STATE_COLOURS
from testkit.plans import ex, seq
from testkit.services import free_port, wait_for
from testkit.workers import REPO, WorkerProcess
from tests.somatize_tasks.cli.helpers import stop_group

pytestmark = pytest.mark.slow
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
CHROME_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1600",
)


def _env(settings: Settings) -> dict[str, str]:
    env = {**os.environ, **settings.to_env()}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


@contextlib.contextmanager
def serving(
    settings: Settings, log_path: Path, *args: str, extra_env: dict[str, str] | None = None
) -> Iterator[str]:
    port = free_port()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "somatize_tasks", "dashboard", "--port", str(port), *args],
            cwd=REPO,
            env={**_env(settings), **(extra_env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:

        def up() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"dashboard exited:\n{log_path.read_text()}")
            try:
                urllib.request.urlopen(url + "/", timeout=2).close()
            except urllib.error.HTTPError:
                return True  # it answers (401 with --basic-auth)
            except OSError:
                return False
            return True

        assert wait_for(up, 30, 0.1)
        yield url
    finally:
        stop_group(proc)


@pytest.fixture(scope="module")
def dashboard(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serving(settings, tmp_path_factory.mktemp("dashboard") / "dashboard.log") as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        if os.environ.get("CI"):
            pytest.fail("chromium and chromium-driver must be installed (.ci/run does it)")
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install ...)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in CHROME_ARGS:
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _js(browser: Any, script: str, *args: Any) -> Any:
    return browser.execute_script(script, *args)


def _bar(browser: Any, node: str) -> dict[str, Any] | None:
    """The node's last bar in the live timeline: state, colour, width."""
    return _js(
        browser,
        """
        const bars = document.querySelectorAll(
            '#timeline rect.bar[data-node="' + arguments[0] + '"]');
        if (!bars.length) return null;
        const b = bars[bars.length - 1];
        return {state: b.dataset.state, fill: b.getAttribute('fill'),
                width: parseFloat(b.getAttribute('width'))};""",
        node,
    )


def test_a_run_appears_its_bars_grow_and_a_failure_shows_red_with_its_message(
    dashboard: str,
    browser: Any,
    settings: Settings,
    two_workers: tuple[WorkerProcess, WorkerProcess],
) -> None:
    browser.get(dashboard + "/")
    ids = {w.worker_id for w in two_workers}
    assert wait_for(
        lambda: (
            ids
            <= set(
                _js(
                    browser,
                    """return [...document.querySelectorAll(
        '#workers tr[data-worker]')].map(r => r.dataset.worker);""",
                )
            )
        ),
        15,
        0.2,
    )
    slots = _js(browser, "return document.querySelector('#workers .slots-cell').textContent")
    assert "/2" in slots  # used/total slots

    # One task per node (no fused chain), so rt_sleep_2 starts a second into the run
    # and its bar visibly widens while the time axis grows with it.
    unfused = settings.model_copy(update={"fuse_chains": False})
    slow = submit_plan(
        seq(ex("rt_make"), ex("rt_sleep"), ex("rt_sleep_2"), ex("rt_sum")),
        params={"rt_sleep": {"s": 1}, "rt_sleep_2": {"s": 4}},
        settings=unfused,
        require_workers=True,
    )
    row = f'#runs tr[data-run="{slow.id}"]'
    assert wait_for(lambda: _js(browser, f"return !!document.querySelector('{row}')"), 10, 0.2)
    _js(browser, f"document.querySelector('{row}').click()")
    assert wait_for(lambda: (_bar(browser, "rt_sleep_2") or {}).get("state") == "running", 15, 0.2)
    first = _bar(browser, "rt_sleep_2")
    time.sleep(1.6)
    later = _bar(browser, "rt_sleep_2")
    assert first and later and later["width"] > first["width"] + 5, (first, later)  # it grows
    assert later["fill"] == STATE_COLOURS["running"]
    assert slow.wait(timeout=30) is not None
    assert wait_for(lambda: (_bar(browser, "rt_sum") or {}).get("state") == "done", 10, 0.2)
    assert wait_for(
        lambda: _js(browser, f"return document.querySelector('{row}').dataset.state") == "done",
        10,
        0.2,
    )

    failing = submit_plan(
        seq(ex("rt_make"), ex("rt_fail")), settings=settings, require_workers=True
    )
    with pytest.raises(NodeFailedError):
        failing.wait(timeout=30)
    browser.get(f"{dashboard}/#run={failing.id}")
    assert wait_for(lambda: (_bar(browser, "rt_fail") or {}).get("state") == "failed", 15, 0.2)
    assert (_bar(browser, "rt_fail") or {})["fill"] == STATE_COLOURS["failed"]
    message = "rt_fail failed on purpose"
    shown = _js(
        browser,
        """return [...document.querySelectorAll('#timeline text.error')]
        .map(t => t.textContent).join(' ')""",
    )
    assert message in shown
    assert message in _js(browser, "return document.querySelector('#run-error').textContent")
    failed_row = f'#runs tr[data-run="{failing.id}"]'
    assert message in _js(browser, f"return document.querySelector('{failed_row}').textContent")
    # The worker's traceback stays out of what the page gets (the API behind it too).
    for path in (f"/api/runs/{failing.id}", "/api/runs"):
        status, body = _fetch(dashboard + path)
        assert status == 200 and message in body, body
        assert "Traceback" not in body and "traceback" not in body, body[:2000]
    assert "Traceback" not in _js(browser, "return document.body.innerText")
    assert not _js(browser, "return [...document.scripts].filter(s => s.src).length")  # no CDN


def _fetch(
    url: str, auth: tuple[str, str] | None = None, host: str | None = None
) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if auth:
        token = base64.b64encode(":".join(auth).encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    if host:
        request.add_header("Host", host)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status), response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def _get(url: str, auth: tuple[str, str] | None = None, host: str | None = None) -> int:
    return _fetch(url, auth, host)[0]


def _refused(settings: Settings, *args: str, env: dict[str, str] | None = None) -> str:
    """The one line the command fails with (asserted to be one, and an error)."""
    refused = subprocess.run(
        [sys.executable, "-m", "somatize_tasks", "dashboard", "--port", str(free_port()), *args],
        cwd=REPO,
        env={**_env(settings), **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith("Error: "), refused.stderr
    return refused.stderr


def test_bound_wider_it_needs_credentials_and_then_checks_them(
    settings: Settings, tmp_path: Path
) -> None:
    refused = _refused(settings, "--address", "0.0.0.0")
    assert "SOMATIZE_DASHBOARD_AUTH" in refused and "--basic-auth-file" in refused
    with serving(
        settings, tmp_path / "auth.log", extra_env={"SOMATIZE_DASHBOARD_AUTH": "admin:s3cret"}
    ) as url:
        assert _get(url + "/api/runs") == 401
        assert _get(url + "/api/runs", ("admin", "wrong")) == 401
        assert _get(url + "/api/runs", ("admin", "s3cret")) == 200
        assert _get(url + "/api/runs/nope/timeline.svg", ("admin", "s3cret")) == 404


def test_with_redis_down_the_page_says_so_and_the_log_holds_no_traceback(
    settings: Settings, tmp_path: Path, browser: Any
) -> None:
    nowhere = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    down = settings.model_copy(update={"redis_url": nowhere})
    log_path = tmp_path / "down.log"
    with serving(down, log_path) as url:
        for path in ("/api/workers", "/api/runs", "/api/runs/abc", "/api/runs/abc/timeline.svg"):
            request = urllib.request.Request(url + path)
            with pytest.raises(urllib.error.HTTPError) as caught:
                urllib.request.urlopen(request, timeout=10)
            assert caught.value.code == 503, path
            said = json.loads(caught.value.read())["error"]
            assert said.startswith(f"Redis unreachable at {nowhere}: "), said
        browser.get(url + "/")
        assert wait_for(
            lambda: "Redis unreachable at" in browser.find_element("id", "updated").text, 20, 0.2
        ), browser.find_element("id", "updated").text
        time.sleep(2)  # the page polls once a second meanwhile
    log = log_path.read_text()
    assert "Traceback" not in log and "500" not in log, log
    lines = [line for line in log.splitlines() if "Redis unreachable at" in line]
    # one at start, one noted by the server for the first failed request: not one a request
    assert len(lines) == 2, log
    assert lines[0].endswith("the page says so until it answers"), lines


def test_the_password_is_never_taken_from_the_command_line(
    settings: Settings, tmp_path: Path
) -> None:
    """``ps`` shows every process's arguments: the old way is refused with one line
    saying where the password goes; a file works."""
    refused = _refused(settings, "--address", "0.0.0.0", "--basic-auth", "admin:s3cret")
    assert "ps" in refused and "SOMATIZE_DASHBOARD_AUTH" in refused and "s3cret" not in refused
    secret = tmp_path / "dashboard.auth"
    secret.write_text("admin:fr0m-a-file\n")
    with serving(
        settings, tmp_path / "file.log", "--address", "127.0.0.1", "--basic-auth-file", str(secret)
    ) as url:
        assert _get(url + "/api/runs") == 401
        assert _get(url + "/api/runs", ("admin", "fr0m-a-file")) == 200
    assert "fr0m-a-file" not in (tmp_path / "file.log").read_text()
    empty = tmp_path / "empty.auth"
    empty.write_text("")
    assert "is empty" in _refused(settings, "--basic-auth-file", str(empty))


def test_a_request_for_another_host_name_is_refused(
    dashboard: str, settings: Settings, tmp_path: Path
) -> None:
    """DNS rebinding: a page on evil.example that resolves to this machine sends
    ``Host: evil.example``; only names (and addresses) the dashboard serves pass."""
    port = dashboard.rsplit(":", 1)[1]
    assert _get(dashboard + "/api/runs", host="evil.example") == 400
    assert _get(dashboard + "/", host=f"evil.example:{port}") == 400
    assert _get(dashboard + "/api/workers", host=f"attacker.localhost.evil:{port}") == 400
    for good in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}"):
        assert _get(dashboard + "/api/runs", host=good) == 200, good
    with serving(settings, tmp_path / "named.log", "--host", "dash.lab.example") as url:
        assert _get(url + "/api/runs", host="dash.lab.example") == 200
        assert _get(url + "/api/runs", host="evil.example") == 400


def test_an_error_page_shows_no_traceback(dashboard: str, settings: Settings) -> None:
    """A run whose record is malformed (a node status that is not an object) makes
    the handler raise: the page says 500 and nothing of the code behind it."""
    client = Redis.from_url(settings.redis_url)
    run_id = f"broken{uuid.uuid4().hex[:8]}"
    meta = f"{settings.key_prefix}:run:{run_id}"
    empty = '{"assignments": [], "phases": [], "data_transfers": [], "warnings": []}'
    client.hset(
        meta, mapping={"status": "running", "distribution": empty, "node_count": 1, "created_at": 0}
    )
    client.hset(f"{meta}:nodes", "n1", "[1]")
    try:
        status, body = _fetch(f"{dashboard}/api/runs/{run_id}")
        assert status == 500, body
        assert "Traceback" not in body and "File " not in body and ".py" not in body, body
    finally:
        client.delete(meta, f"{meta}:nodes")
