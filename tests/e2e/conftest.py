"""End-to-end fixtures: the real ASGI app under daphne (HTTP + websockets) in a thread, Debian's
Chromium driven by the Python ``playwright`` package, users in each role, screenshots.

Chromium: /usr/bin/chromium (``apt-get install -y chromium``; never ``playwright install``). When
it is missing and cannot be installed the tests skip with that reason printed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "var" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PASSWORD = "e2e-password-1"


def _chromium_or_skip() -> str:
    if not Path(CHROMIUM).exists() and shutil.which("apt-get") and os.geteuid() == 0:
        subprocess.run(["apt-get", "install", "-y", "chromium"], capture_output=True, timeout=600)
    if not Path(CHROMIUM).exists():
        reason = f"{CHROMIUM} missing and `apt-get install -y chromium` did not provide it"
        print(f"SKIP e2e: {reason}")
        pytest.skip(reason)
    return CHROMIUM


def _frontend_built() -> None:
    index = ROOT / "frontend" / "dist" / "index.html"
    if index.exists():
        return
    frontend = ROOT / "frontend"
    if not (frontend / "node_modules").exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=frontend, check=True)
    subprocess.run(["npm", "run", "build"], cwd=frontend, check=True)


class DaphneThread(threading.Thread):
    """daphne serving the project's ASGI application on a free loopback port."""

    def __init__(self) -> None:
        super().__init__(name="e2e-daphne", daemon=True)
        self.ready = threading.Event()
        self.server: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            from channels.routing import get_default_application
            from daphne.server import Server

            self.server = Server(
                application=get_default_application(),
                endpoints=["tcp:port=0:interface=127.0.0.1"],
                signal_handlers=False,
                ready_callable=self.ready.set,
            )
            self.server.run()
        except BaseException as error:  # surfaced by the fixture
            self.error = error
            self.ready.set()

    @property
    def url(self) -> str:
        deadline = time.monotonic() + 20
        while not self.server.listening_addresses:
            if time.monotonic() > deadline:
                raise RuntimeError("daphne did not start listening")
            time.sleep(0.02)
        host, port = self.server.listening_addresses[0]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        from twisted.internet import reactor

        reactor_: Any = reactor
        reactor_.callFromThread(reactor_.stop)
        self.join(10)


@pytest.fixture(scope="session")
def asgi_server(
    django_db_setup: Any, django_db_blocker: Any, starts_processes: None
) -> Iterator[str]:
    _frontend_built()
    server = DaphneThread()
    server.start()
    server.ready.wait(30)
    if server.error is not None:
        raise server.error
    yield server.url
    server.stop()


@pytest.fixture(scope="module")
def browser(starts_processes: None) -> Iterator[Any]:
    """Module-scoped: pytest-django runs non-database tests after these, and Playwright's event
    loop on the main thread must be gone by then (pytest-asyncio needs that thread free)."""
    executable = _chromium_or_skip()
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop on the main thread; the tests' own ORM calls
    # there are still plain synchronous code, so Django's async-safety guard is lifted meanwhile.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def live(asgi_server: str, transactional_db: Any, settings: Any) -> str:
    settings.LOOM_DASHBOARD_SNAPSHOT_INTERVAL_S = 0.25
    settings.ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
    return asgi_server


def make_user(username: str, role: str | None) -> Any:
    from django.contrib.auth.models import User

    from apps.dashboard.roles import ADMIN_GROUP, OPERATOR_GROUP, roles_ensure

    user = User.objects.create_user(username=username, password=PASSWORD)
    groups = roles_ensure()
    if role == "admin":
        user.groups.add(groups[ADMIN_GROUP])
    elif role == "operator":
        user.groups.add(groups[OPERATOR_GROUP])
    return user


@pytest.fixture
def page(browser: Any, live: str) -> Iterator[Any]:
    context = browser.new_context(base_url=live, viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def login(page: Any, username: str) -> None:
    page.goto("/login/")
    page.fill('input[name="username"]', username)
    page.fill('input[name="password"]', PASSWORD)
    page.click('button[type="submit"]')
    page.wait_for_selector("header.topbar")
    page.wait_for_selector('[data-live-state="live"]')


def publish_in_server(topic: str, payload: dict[str, Any]) -> None:
    """Publish on the web server's own event loop, as an in-process scheduler service does
    (the embedded mode's in-memory channel layer belongs to that loop)."""
    import asyncio

    from twisted.internet import reactor

    from apps.dashboard.live.broadcast import apublish

    twisted_reactor: Any = reactor
    loop = twisted_reactor._asyncioEventloop
    asyncio.run_coroutine_threadsafe(apublish(topic, payload), loop).result(10)


def screenshot(page: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
