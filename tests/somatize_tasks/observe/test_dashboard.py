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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
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
def serving(settings: Settings, log_path: Path, *args: str) -> Iterator[str]:
    port = free_port()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "somatize_tasks", "dashboard", "--port", str(port), *args],
            cwd=REPO,
            env=_env(settings),
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
    assert not _js(browser, "return [...document.scripts].filter(s => s.src).length")  # no CDN


def _get(url: str, auth: tuple[str, str] | None = None) -> int:
    request = urllib.request.Request(url)
    if auth:
        token = base64.b64encode(":".join(auth).encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_bound_wider_it_needs_credentials_and_then_checks_them(
    settings: Settings, tmp_path: Path
) -> None:
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "somatize_tasks",
            "dashboard",
            "--address",
            "0.0.0.0",
            "--port",
            str(free_port()),
        ],
        cwd=REPO,
        env=_env(settings),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert refused.stderr.startswith("Error: ") and "--basic-auth" in refused.stderr
    with serving(settings, tmp_path / "auth.log", "--basic-auth", "admin:s3cret") as url:
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
