"""The Rollouts page's router policy form in a real Chromium, against a real router process: an
admin's change reaches the running router through Redis and the router routes with it, without
a restart; an operator (no admin role) is shown no form, and the API refuses the change (403)
with nothing reaching Redis or the router."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from bench.router_overhead import _start
from tests.e2e.conftest import login, make_user, screenshot
from workers.router.registry import RegistryNames

pytestmark = [pytest.mark.e2e]

ROUTER = "e2e-r1"


class RouterProcess:
    """An emulated engine and a router named ``ROUTER`` in front of it, on the test's Redis
    under a prefix of its own."""

    def __init__(self, redis_url: str) -> None:
        self.names = RegistryNames(f"e2e-router-{uuid.uuid4().hex[:10]}")
        self.redis = redis.Redis.from_url(redis_url)
        self.processes: list[subprocess.Popen[str]] = []
        engine, engine_url = _start(
            ["workers.engine", "--port", "0", "--model-name", "tiny", "--time-scale", "0.01"]
        )
        self.processes.append(engine)
        router, self.url = _start([
            "workers.router", "--port", "0", "--worker", engine_url, "--policy", "heddle",
            "--redis-url", redis_url, "--prefix", self.names.prefix, "--name", ROUTER,
            "--metrics-interval", "0.1", "--health-interval", "0.2",
        ])  # fmt: skip
        self.processes.append(router)

    def stored(self) -> dict[str, Any] | None:
        """The policy the control plane wrote for the router (what the router follows)."""
        raw = self.redis.get(self.names.router_policy(ROUTER))
        return None if raw is None else dict(json.loads(raw))

    def routing_with(self) -> str | None:
        """The policy the running router reports it routes with: its newest ``workers`` entry
        on the state stream (appended after each read of its workers' metrics)."""
        entries: list[tuple[bytes, dict[bytes, bytes]]] = self.redis.xrevrange(  # type: ignore[assignment]
            self.names.trajectory_state, count=50
        )
        for _, fields in entries:
            state = json.loads(fields[b"state"])
            if state.get("event") == "workers" and state.get("router") == ROUTER:
                return str(state["policy"])
        return None

    def wait_routing_with(self, policy: str, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.routing_with() == policy:
                return
            time.sleep(0.05)
        raise AssertionError(f"the router never routed with {policy}: {self.routing_with()}")

    def close(self) -> None:
        for process in reversed(self.processes):
            process.terminate()
        deadline = time.monotonic() + 10
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.1, deadline - time.monotonic()))
            process.kill()  # nothing once it has exited
            process.wait()
        keys = list(self.redis.scan_iter(match=f"{self.names.prefix}:*"))
        if keys:
            self.redis.delete(*keys)
        self.redis.close()


@pytest.fixture
def router(live: str, redis_url: str, settings: Any) -> Iterator[RouterProcess]:
    """The web server writes policies to the router's Redis and prefix (production settings)."""
    started = RouterProcess(redis_url)
    settings.REDIS_URL = redis_url
    settings.LOOM_STREAM_PREFIX = started.names.prefix
    try:
        started.wait_routing_with("heddle")  # up, and reporting what it was started with
        yield started
    finally:
        started.close()


def _rollouts(page: Any) -> None:
    page.click('a[data-nav="rollouts"]')
    page.wait_for_selector("[data-router-policies]")


def test_an_admin_changes_the_policy_and_the_running_router_follows(
    page: Any, router: RouterProcess
) -> None:
    make_user("ada", "admin")
    login(page, "ada")
    _rollouts(page)
    form = page.locator("form[data-router-policy-form]")
    form.locator('input[name="router"]').fill(ROUTER)
    form.locator('select[name="policy"]').select_option("round_robin")
    form.locator('select[name="predictor"]').select_option("prompt_history")
    form.locator("button[type=submit]").click()
    page.wait_for_function(
        "() => document.querySelector('[data-router-policy-status]')?.textContent"
        " === 'Router e2e-r1 now routes with round_robin (v1).'"
    )
    stored = router.stored()
    assert stored is not None
    assert (stored["policy"], stored["predictor"], stored["version"], stored["changed_by"]) == (
        "round_robin", "prompt_history", 1, "ada",
    )  # fmt: skip
    router.wait_routing_with("round_robin")  # adopted by the running process, no restart
    assert all(process.poll() is None for process in router.processes)
    screenshot(page, "30-router-policy-set")

    # A second change, after a reload: the list shows who set the current one.
    page.reload()
    page.wait_for_selector(f'[data-router="{ROUTER}"]')
    assert "round_robin" in page.locator(f'[data-router="{ROUTER}"]').inner_text()
    assert "changed by ada" in page.locator(f'[data-router="{ROUTER}"]').inner_text()
    form.locator('input[name="router"]').fill(ROUTER)
    form.locator('select[name="policy"]').select_option("least_load")
    form.locator("button[type=submit]").click()
    page.wait_for_selector("[data-router-policy-status]:has-text('least_load (v2)')")
    router.wait_routing_with("least_load")

    # Bad input from the form is a 400 naming the field, shown on the page; nothing changes.
    form.locator('input[name="router"]').fill("r" * 101)
    form.locator("button[type=submit]").click()
    page.wait_for_selector("[data-router-policy-status]:has-text('router: at most 100')")
    stored = router.stored()
    assert stored is not None and stored["version"] == 2


def test_an_operator_sees_no_form_and_the_api_refuses_the_change(
    page: Any, router: RouterProcess
) -> None:
    make_user("otto", "operator")
    login(page, "otto")
    _rollouts(page)
    assert page.locator("form[data-router-policy-form]").count() == 0
    note = page.locator("[data-router-policy-read-only]").inner_text()
    assert "needs the admin role" in note
    screenshot(page, "31-router-policy-read-only")
    # The API, called with the operator's own session and CSRF token as the page would.
    status, body = page.evaluate(
        """async (router) => {
          const cookie = document.cookie.match(/(?:^|;\\s*)csrftoken=([^;]+)/);
          const meta = document.querySelector('meta[name="csrf-token"]');
          const token = cookie ? decodeURIComponent(cookie[1]) : (meta ? meta.content : "");
          const response = await fetch(`/dashboard/api/rollouts/routers/${router}/policy`, {
            method: "POST", credentials: "same-origin",
            headers: {"Content-Type": "application/json", "X-CSRFToken": token},
            body: JSON.stringify({policy: "round_robin", predictor: "prompt_history"}),
          });
          return [response.status, await response.json()];
        }""",
        ROUTER,
    )
    assert status == 403
    assert "admin role" in json.dumps(body)  # refused for the role (not for CSRF)
    assert router.stored() is None
    time.sleep(1.5)  # longer than the router's poll interval: nothing to adopt
    assert router.routing_with() == "heddle"

    from apps.trajectories.models import RouterPolicy

    assert not RouterPolicy.objects.filter(router=ROUTER).exists()
