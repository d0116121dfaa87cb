"""The operator dashboard in a real Chromium."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import login, make_user, publish_in_server, screenshot

pytestmark = [pytest.mark.e2e]

SET_VISIBILITY = """() => {
    Object.defineProperty(document, 'visibilityState', {configurable: true, get: () => '%s'});
    document.dispatchEvent(new Event('visibilitychange'));
}"""


def _cluster() -> dict[str, Any]:
    """A CPU pool with one 4-core node and a job with an API key."""
    from django.utils import timezone

    from tests.factories import JobFactory, NodeFactory, PoolFactory, make_key

    pool: Any = PoolFactory(name="cpu")
    node: Any = NodeFactory(name="node-a", pool=pool, cores=4, last_heartbeat_at=timezone.now())
    job: Any = JobFactory(name="trainer")
    _, key = make_key(job=job)
    return {"pool": pool, "node": node, "job": job, "key": key}


def _submit(live: str, key: str, count: int) -> list[int]:
    items = [
        {"pool": "cpu", "command": "sleep 1", "demand": {"cpu": {"min": 1, "max": 2}}}
        for _ in range(count)
    ]
    response = httpx.post(
        f"{live}/api/v1/actions/batch/",
        json={"items": items},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert response.status_code == 201, response.text
    return [entry["id"] for entry in response.json()["items"]]


def _run_to_completion(action_ids: list[int], node_id: int) -> None:
    """Play the execution plane for these actions: schedule, start, finish."""
    from apps.resources.models import Node
    from tests.apps.helpers import finish, schedule, start

    node = Node.objects.get(pk=node_id).name
    for index, action_id in enumerate(action_ids):
        core = index % 4
        started = time.time()
        assert schedule(action_id, allocation={"cores": [core], "units": 1}, node=node)
        start(action_id, at=started)
        finish(action_id, exit_code=0, started_at=started)  # the result carries its start


def _stat(page: Any, pool: str, stat: str) -> str:
    return page.locator(f'[data-pool="{pool}"] [data-stat="{stat}"]').inner_text()


def test_login_then_queue_and_act_change_live_on_the_overview(page: Any, live: str) -> None:
    cluster = _cluster()
    make_user("ada", "admin")
    page.goto("/")
    assert "/login/" in page.url
    screenshot(page, "01-login")
    login(page, "ada")
    page.wait_for_selector('[data-pool="cpu"]')
    assert _stat(page, "cpu", "waiting") == "0"
    assert _stat(page, "cpu", "p50") == "–"
    navigations: list[str] = []
    page.on("framenavigated", lambda frame: navigations.append(frame.url))

    ids = _submit(live, cluster["key"], 12)
    page.wait_for_function(
        "document.querySelector('[data-pool=\"cpu\"] [data-stat=\"waiting\"]').textContent === '12'"
    )
    _run_to_completion(ids[:5], cluster["node"].pk)
    page.wait_for_function(
        "document.querySelector('[data-pool=\"cpu\"] [data-stat=\"waiting\"]').textContent === '7'"
    )
    page.wait_for_function(
        "document.querySelector('[data-pool=\"cpu\"] [data-stat=\"p50\"]').textContent !== '–'"
    )
    assert navigations == []  # no reload: the numbers came over the websocket
    assert page.locator('[data-pool="cpu"] .chart').count() == 3
    # The scheduler service's own (partial) snapshot: its head-of-queue reason shows, the ACT
    # numbers from the database snapshots stay.
    act_p50 = _stat(page, "cpu", "p50")
    publish_in_server(
        "pool:cpu",
        {
            "pool": "cpu",
            "at": time.time(),
            "waiting": 7,
            "running": 0,
            "head_wait_reason": "no cores free",
            "policy_version": None,
            "nodes": {},
        },
    )
    page.locator('[data-head-reason="cpu"]', has_text="no cores free").wait_for()
    assert _stat(page, "cpu", "p50") == act_p50
    screenshot(page, "02-overview-live")


def test_admin_changes_a_policy_and_sees_the_new_version_applied(page: Any, live: str) -> None:
    _cluster()
    make_user("ada", "admin")
    login(page, "ada")
    page.click('a[data-nav="policies"]')
    section = page.locator('[data-policy-pool="cpu"]')
    section.locator('input[name="depth"]').fill("0")
    section.locator('button[type="submit"]').click()
    assert section.locator('[data-error-for="depth"]').inner_text() == "must be ≥ 1"
    section.locator('input[name="depth"]').fill("4")
    section.locator('select[name="algorithm"]').select_option("fcfs-min")
    section.locator('button[type="submit"]').click()
    page.wait_for_selector('[data-policy-pool="cpu"] tr[data-version="1"]')
    section = page.locator('[data-policy-pool="cpu"]')
    section.locator('input[name="depth"]').fill("6")
    section.locator('button[type="submit"]').click()
    row = page.locator('[data-policy-pool="cpu"] tr[data-version="2"]')
    row.wait_for()
    assert "ada" in row.inner_text()
    assert "depth" in row.inner_text() and "4" in row.inner_text() and "6" in row.inner_text()
    badge = page.locator('[data-applied-for="cpu"]')
    assert badge.inner_text() == "v2 saved; the scheduler has not reported yet"
    from apps.policies.models import Policy

    assert Policy.objects.get(pool__name="cpu").settings["depth"] == 6
    # The scheduler service reports the version it runs in its own snapshot shape
    # (workers/scheduler/service.py ``snapshot``): first the old one, then the new one.
    snapshot = {"pool": "cpu", "at": time.time(), "waiting": 0, "running": 0, "nodes": {}}
    publish_in_server("pool:cpu", {**snapshot, "policy_version": 1, "head_wait_reason": None})
    page.wait_for_function(
        "document.querySelector('[data-applied-for=\"cpu\"]').textContent"
        " === 'scheduler runs v1; v2 pending'"
    )
    publish_in_server("pool:cpu", {**snapshot, "policy_version": 2, "head_wait_reason": None})
    page.wait_for_function(
        "document.querySelector('[data-applied-for=\"cpu\"]').textContent === 'applied: v2'"
    )
    screenshot(page, "03-policies-admin")


def test_cancel_an_action_from_its_page(page: Any, live: str) -> None:
    cluster = _cluster()
    make_user("ada", "admin")
    action_id = _submit(live, cluster["key"], 1)[0]
    login(page, "ada")
    page.goto(f"/actions/{action_id}")
    page.wait_for_selector(".wait-reason")
    screenshot(page, "04-action-queued")
    page.click('[data-action="cancel"]')
    page.wait_for_selector("h1 .badge.status-cancelled")
    from apps.actions.models import Action

    action = Action.objects.get(pk=action_id)
    assert action.status == "cancelled" and "ada" in action.error_reason
    screenshot(page, "05-action-cancelled")


def test_read_only_operator_cannot_change_a_policy_in_the_ui_or_over_the_socket(
    page: Any, live: str
) -> None:
    _cluster()
    make_user("otto", "operator")
    login(page, "otto")
    page.goto("/policies")
    section = page.locator('[data-policy-pool="cpu"]')
    section.wait_for()
    assert section.locator('input[name="depth"]').is_disabled()
    assert section.locator('button[type="submit"]').is_disabled()
    assert "Read-only role" in section.inner_text()
    screenshot(page, "06-policies-read-only")
    reply = page.evaluate(
        """() => new Promise((resolve) => {
            const ws = new WebSocket(`ws://${location.host}/ws/`);
            ws.onopen = () => ws.send(JSON.stringify({op: "command", id: 1, name: "policy.update",
                args: {pool: "cpu", settings: {depth: 9}}}));
            ws.onmessage = (event) => { resolve(JSON.parse(event.data)); ws.close(); };
        })"""
    )
    assert reply["op"] == "result" and reply["ok"] is False
    assert reply["reason"].startswith("forbidden")
    status = page.evaluate(
        """async () => (await fetch('/dashboard/api/policies/cpu', {method: 'POST',
            headers: {'Content-Type': 'application/json',
                      'X-CSRFToken': document.cookie.match(/csrftoken=([^;]+)/)[1]},
            body: JSON.stringify({settings: {depth: 9}})})).status"""
    )
    assert status == 403
    from apps.policies.models import Policy

    assert not Policy.objects.exists()


def test_every_page_renders_live_in_both_themes(page: Any, live: str) -> None:
    cluster = _cluster()
    make_user("ada", "admin")
    ids = _submit(live, cluster["key"], 6)
    _run_to_completion(ids[:2], cluster["node"].pk)
    from tests.apps.helpers import schedule, start

    schedule(ids[2], allocation={"cores": [0, 1], "units": 2}, node=cluster["node"].name)
    start(ids[2])
    login(page, "ada")

    page.goto("/pools/cpu")
    card = page.locator(f'[data-node="{cluster["node"].pk}"]')
    card.wait_for()
    assert card.locator(".slot.held").count() == 2
    card.locator("button", has_text="Drain node").click()
    card.locator(".badge.status-draining").wait_for()
    screenshot(page, "07-pool-and-node")
    card.locator("button", has_text="Resume node").click()
    page.wait_for_function("!document.querySelector('[data-node] .badge.status-draining')")

    page.goto(f"/jobs/{cluster['job'].pk}?status=queued")
    page.wait_for_selector("table.data tbody tr td a")
    assert page.locator('select[name="status"]').input_value() == "queued"
    rows = page.locator("table.data tbody tr")
    assert rows.count() == 3
    assert "queued behind" in rows.first.inner_text() or "next in line" in rows.first.inner_text()
    page.select_option('select[name="status"]', "succeeded")
    page.wait_for_function("location.search === '?status=succeeded'")
    page.wait_for_function("document.querySelectorAll('table.data tbody tr').length === 2")
    screenshot(page, "08-job")

    page.goto(f"/actions/{ids[0]}")
    page.wait_for_selector(".timeline li.done")
    assert page.locator(".timeline li.done").count() == 4
    screenshot(page, "09-action-finished")

    page.goto("/jobs")
    page.wait_for_selector(f"a[href='/jobs/{cluster['job'].pk}']")
    screenshot(page, "10-jobs")

    page.goto("/launch")
    page.wait_for_selector("select[name='pool'] option[value='cpu']", state="attached")
    page.fill(".launch-form input[name='count']", "20")
    page.click("text=Start demo workload")
    page.wait_for_selector("text=Submitted 20 actions")
    sim_form = page.locator(".launch-form").nth(1)
    sim_form.locator("input[name='count']").fill("20")
    sim_form.locator("select[name='b.algorithm']").select_option("fcfs-min")
    page.click("text=Compare policies")
    table = page.locator("table.comparison")
    table.wait_for()
    assert "A: elastic" in table.text_content() and "B: fcfs-min" in table.text_content()
    screenshot(page, "11-launch")

    # The tab pauses while hidden and refetches once when visible again.
    page.goto("/")
    page.wait_for_selector('[data-pool="cpu"]')
    page.evaluate(SET_VISIBILITY % "hidden")
    page.wait_for_selector('[data-live-state="paused"]')
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.evaluate(SET_VISIBILITY % "visible")
    page.wait_for_selector('[data-live-state="live"]')
    page.wait_for_timeout(300)
    assert sum("/dashboard/api/overview" in url for url in requests) == 1

    page.click("button[aria-label='toggle theme']")
    theme = page.evaluate("document.documentElement.dataset.theme")
    screenshot(page, f"12-overview-{theme}")
    page.click("button[aria-label='toggle theme']")
    other = page.evaluate("document.documentElement.dataset.theme")
    assert {theme, other} == {"light", "dark"}
    screenshot(page, f"13-overview-{other}")
    assert json.loads(page.evaluate("JSON.stringify(localStorage.getItem('loom-theme'))")) == other
