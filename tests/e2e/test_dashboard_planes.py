"""The GPU map, buffer and Rollouts pages in a real Chromium: what an operator sees, and that it
changes live (over the websocket, without a reload) when the system of record changes."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from django.utils import timezone

from tests.apps.dashboard.plane_data import (
    allocated,
    buffer_with_history,
    finished,
    gpu_action,
    gpu_cache_store,
    gpu_cluster,
)
from tests.e2e.conftest import PASSWORD, login, make_user, screenshot

pytestmark = [pytest.mark.e2e]


def _no_reloads(page: Any) -> list[str]:
    navigations: list[str] = []
    page.on("framenavigated", lambda frame: navigations.append(frame.url))
    return navigations


def _text(page: Any, selector: str) -> str:
    return str(page.locator(selector).inner_text())


def _wait_text(page: Any, selector: str, text: str) -> None:
    page.wait_for_function(
        "([selector, text]) => document.querySelector(selector)?.textContent === text",
        arg=[selector, text],
    )


def test_gpu_map_shows_chunks_and_services_and_follows_the_cache(page: Any, live: str) -> None:
    cluster = gpu_cluster()
    running = allocated(cluster, "reward", [0, 1])
    allocated(cluster, "teacher", [3])  # teacher is not resident on GPU 3: it is restored there
    gpu_action(cluster, "reward", "queued")
    cold = {"queue_s": 0.0, "restore_s": 0.4, "execute_s": 0.6}
    restored = [{"kind": "load", "service": "reward", "start": 0, "size": 2, "at": 1.0}]
    finished(cluster, "reward", 2.0, service_timings=cold, cache_events=restored)
    make_user("otto", "operator")
    login(page, "otto")
    page.click('a[data-nav="gpus"]')
    node = page.locator('[data-gpu-node="gpu-a"]')
    node.wait_for()
    states = [node.locator(f'[data-gpu="{i}"]').get_attribute("data-state") for i in range(4)]
    assert states == ["busy", "busy", "warm", "restoring"]
    assert node.locator('[data-gpu="0"]').get_attribute("href") == f"/actions/{running.pk}"
    assert node.locator('[data-chunk="reward@0+2"]').inner_text() == "reward"
    assert "judge: weights missing" in node.inner_text()
    assert _text(page, '[data-svc-queued="reward"]') == "1"
    assert _text(page, '[data-svc-act="reward"]') != "–"
    assert _text(page, '[data-svc-restores="reward"]') == "1 / 1"  # from the agent's report
    assert "restoring as they happen" in _text(page, "[data-missing]")
    screenshot(page, "20-gpu-map")

    navigations = _no_reloads(page)
    # The agent reports that teacher was evicted from GPU 2, and two more reward requests queue.
    gpu_cache_store([{"service": "reward", "start": 0, "size": 2, "last_used": time.time()}])
    gpu_action(cluster, "reward", "queued")
    gpu_action(cluster, "reward", "queued")
    page.wait_for_selector('[data-gpu-node="gpu-a"] [data-gpu="2"][data-state="free"]')
    _wait_text(page, '[data-svc-queued="reward"]', "3")
    assert page.locator('[data-chunk^="teacher@"]').count() == 0
    assert navigations == []
    screenshot(page, "21-gpu-map-live")
    page.click('[data-pool-filter="gpu"]')  # the filter lives in the URL
    page.wait_for_function("location.search === '?pool=gpu'")
    page.wait_for_selector('[data-gpu-node="gpu-a"] [data-gpu="2"][data-state="free"]')


def test_buffer_page_shows_fill_trigger_firings_and_actors_live(page: Any, live: str) -> None:
    from apps.buffers.models import BufferActorState, BufferSnapshot
    from tests.factories import JobFactory

    job: Any = JobFactory(name="ppo")
    buffer = buffer_with_history(job)
    make_user("otto", "operator")
    login(page, "otto")
    page.click('a[data-nav="buffers"]')
    page.click('[data-buffer-link="rollout"]')
    page.wait_for_selector('[data-stat="fill"] [data-fill]')
    assert page.url.endswith(f"/buffers/{buffer.pk}")
    assert _text(page, '[data-stat="held"]') == "60 / 100"
    assert _text(page, '[data-firings="batch"]') == "9"
    assert page.locator(".chart").count() == 2
    assert page.locator("[data-missing]").count() == 0
    assert _text(page, '[data-actor-state="ppo/actor0"]') == "pre-warmed"
    assert _text(page, '[data-actor-starts="ppo/actor0"]') == "11 / 1 (92% restored)"
    assert _text(page, '[data-actor-p99="ppo/actor1"]') == "300 ms"
    assert _text(page, "[data-actor-summary]") == "1 pre-warmed · 1 running"
    screenshot(page, "22-buffer")

    navigations = _no_reloads(page)
    BufferSnapshot.objects.create(
        buffer=buffer,
        taken_at=timezone.now(),
        held=85,
        complete=80,
        actors=3,
        steps_written=120,
        samples=40,
        firings={"batch": 12, "tick": 4},
    )
    BufferActorState.objects.filter(buffer=buffer, actor="actor1").update(state="checkpointed")
    _wait_text(page, '[data-stat="held"]', "85 / 100")
    _wait_text(page, '[data-firings="batch"]', "12")
    _wait_text(page, '[data-actor-state="ppo/actor1"]', "checkpointed")
    assert page.locator('[data-stat="fill"] .fill-high').count() == 1
    assert navigations == []
    page.click("button[aria-label='toggle theme']")  # the charts rebuild in the other theme
    page.wait_for_function("document.querySelectorAll('.chart .uplot').length === 2")
    screenshot(page, f"22-buffer-{page.evaluate('document.documentElement.dataset.theme')}")


def _trajectory(live: str, key: str, job_id: int, **progress: Any) -> int:
    """Register a trajectory over REST, then report its progress as the router's drain does."""
    headers = {"Authorization": f"Bearer {key}"}
    created = httpx.post(
        f"{live}/api/v1/trajectories/",
        json={"job": job_id, "training_step": 1, "group_id": progress.pop("group", "")},
        headers=headers,
        timeout=30,
    )
    assert created.status_code == 201, created.text
    trajectory_id = int(created.json()["id"])
    if progress:
        _progress(live, key, trajectory_id, **progress)
    return trajectory_id


def _progress(live: str, key: str, trajectory_id: int, **progress: Any) -> None:
    response = httpx.patch(
        f"{live}/api/v1/trajectories/{trajectory_id}/",
        json=progress,
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text


def test_rollouts_page_shows_workers_and_the_long_tail_live(page: Any, live: str) -> None:
    from tests.factories import JobFactory, make_key

    job: Any = JobFactory(name="grpo")
    _, key = make_key(job=job)
    long_one = _trajectory(live, key, job.pk, status="generating", llm_worker="w0", tokens=120,
                           predicted_remaining_tokens=900, group="g1")  # fmt: skip
    short_one = _trajectory(live, key, job.pk, status="tool_call", llm_worker="w1", tokens=40,
                            predicted_remaining_tokens=60, group="g1")  # fmt: skip
    _trajectory(live, key, job.pk)  # registered, not placed yet
    make_user("otto", "operator")
    login(page, "otto")
    page.click('a[data-nav="rollouts"]')
    page.wait_for_selector('[data-worker="w0"]')
    rows = page.locator("[data-trajectory]")
    assert rows.nth(0).inner_text() == f"#{long_one}"  # the longest predicted remaining first
    assert _text(page, f'[data-predicted="{long_one}"]') == "900"
    assert _text(page, '[data-count="unplaced"]') == "1"
    assert _text(page, '[data-worker-trajectories="w0"]') == "1"
    assert "not reported" in _text(page, ".notice")  # priority: no router stream here
    screenshot(page, "23-rollouts")

    navigations = _no_reloads(page)
    # The short one's prediction grows past the long one's; the long one finishes.
    _progress(live, key, short_one, status="generating", predicted_remaining_tokens=2000)
    _progress(live, key, long_one, status="finished", predicted_remaining_tokens=0)
    page.wait_for_function(
        "(id) => document.querySelector('[data-trajectory]')?.textContent === `#${id}`",
        arg=short_one,
    )
    _wait_text(page, '[data-count="tool_call"]', "0")  # active counts are exact at once
    page.wait_for_selector(f'[data-trajectory="{long_one}"]', state="detached")
    assert navigations == []

    page.select_option('select[name="status"]', "finished")
    page.click("form.filters button[type=submit]")
    page.wait_for_function("location.search === '?status=finished'")
    page.wait_for_selector(f'[data-trajectory="{long_one}"]')
    assert page.locator("[data-trajectory]").count() == 1
    page.fill('input[name="job"]', "nope")
    page.click("form.filters button[type=submit]")
    page.wait_for_selector(".notice:has-text('job')")
    screenshot(page, "24-rollouts-filtered")


def test_the_new_pages_refuse_a_person_without_a_role(page: Any, live: str) -> None:
    make_user("nobody", None)
    page.goto("/login/")
    page.fill('input[name="username"]', "nobody")
    page.fill('input[name="password"]', PASSWORD)
    page.click('button[type="submit"]')
    for path in ("/gpus", "/buffers", "/rollouts"):
        response = page.goto(path)
        assert response is not None and response.status == 403, path
