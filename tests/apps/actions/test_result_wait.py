"""``GET /actions/{id}/result?wait=`` returns as soon as the action ends, without polling."""

from __future__ import annotations

import threading
import time

import pytest
import redis
from django.conf import settings
from django.db import connection

from apps.actions import notify, services
from controlplane.http_bridge import HANGUP_KEY, Hangup
from tests.apps.helpers import error_fields, finish, run_to_success, schedule
from tests.factories import ActionFactory


@pytest.mark.django_db
@pytest.mark.parametrize("wait", ["-1", "61", "soon", "nan", "inf"])
def test_wait_is_validated(job_actor, wait):
    action = ActionFactory.create(job=job_actor.job)
    response = job_actor.client.get(f"/api/v1/actions/{action.pk}/result/", {"wait": wait})
    assert response.status_code == 400
    assert "wait" in error_fields(response)


@pytest.mark.django_db
def test_active_action_is_202_after_the_wait(job_actor):
    action = ActionFactory.create(job=job_actor.job)
    started = time.monotonic()
    response = job_actor.client.get(f"/api/v1/actions/{action.pk}/result", {"wait": "0.3"})
    assert response.status_code == 202
    assert response.json()["status"] == "queued"
    assert time.monotonic() - started >= 0.3
    assert notify.get_notifier().waiter_count() == 0  # type: ignore[attr-defined]


@pytest.mark.django_db
def test_ended_action_is_200_at_once(job_actor):
    action = ActionFactory.create(job=job_actor.job)
    services.action_cancel(action_id=action.pk, reason="stop")
    response = job_actor.client.get(f"/api/v1/actions/{action.pk}/result/", {"wait": "30"})
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "cancelled" and body["error_reason"] == "stop"
    assert body["act_s"] >= 0


def _finish_soon(action_id: int, delay: float) -> threading.Thread:
    def run() -> None:
        try:
            time.sleep(delay)
            run_to_success(action_id, score=0.75)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
def test_waiter_wakes_when_another_thread_finishes(job_actor):
    action = ActionFactory.create(job=job_actor.job)
    thread = _finish_soon(action.pk, delay=0.3)
    started = time.monotonic()
    response = job_actor.client.get(f"/api/v1/actions/{action.pk}/result/", {"wait": "20"})
    elapsed = time.monotonic() - started
    thread.join()
    assert response.status_code == 200, response.json()
    assert response.json()["score"] == 0.75
    assert elapsed < 10  # woken by the notification, long before the 20 s wait


@pytest.fixture
def redis_mode(settings):
    url = settings.LOOM_TEST_REDIS_URL
    try:
        redis.Redis.from_url(url).ping()
    except redis.ConnectionError:
        pytest.skip(f"no Redis at {url}")
    settings.REDIS_URL = url
    return url


@pytest.mark.redis
def test_redis_notifier_round_trip(redis_mode):
    notifier = notify.get_notifier()
    assert isinstance(notifier, notify.RedisNotifier)
    with notifier.subscribe(424242) as subscription:
        assert not subscription.wait(0.05)
        threading.Timer(0.1, notifier.publish, args=([424242],)).start()
        assert subscription.wait(5)


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_result_wait_through_redis(job_actor, redis_mode):
    assert redis_mode == settings.REDIS_URL
    action = ActionFactory.create(job=job_actor.job)
    thread = _finish_soon(action.pk, delay=0.3)
    response = job_actor.client.get(f"/api/v1/actions/{action.pk}/result/", {"wait": "20"})
    thread.join()
    assert response.status_code == 200
    assert response.json()["status"] == "succeeded"


def test_in_process_notifier_only_wakes_its_action():
    notifier = notify.InProcessNotifier()
    with notifier.subscribe(1) as first, notifier.subscribe(2) as second:
        notifier.publish([2])
        assert second.wait(0) and not first.wait(0)
    assert notifier.waiter_count() == 0


@pytest.mark.django_db
def test_await_many_returns_what_has_ended(job_actor):
    queued, cancelled = (
        ActionFactory.create(job=job_actor.job),
        ActionFactory.create(job=job_actor.job),
    )
    services.action_cancel(action_id=cancelled.pk)
    response = job_actor.client.post(
        "/api/v1/actions/await/", {"ids": [queued.pk, cancelled.pk], "wait": 5}, format="json"
    )
    assert response.status_code == 200
    body = response.json()
    assert [a["id"] for a in body["ended"]] == [cancelled.pk]
    assert body["pending"] == [queued.pk]


@pytest.mark.django_db(transaction=True)
def test_await_many_wakes_on_the_first_end(job_actor):
    first, second = ActionFactory.create(job=job_actor.job), ActionFactory.create(job=job_actor.job)
    thread = _finish_soon(second.pk, delay=0.3)
    started = time.monotonic()
    response = job_actor.client.post(
        "/api/v1/actions/await/", {"ids": [first.pk, second.pk], "wait": 20}, format="json"
    )
    thread.join()
    assert time.monotonic() - started < 10
    assert [a["id"] for a in response.json()["ended"]] == [second.pk]


@pytest.mark.django_db
def test_await_many_renders_results_as_get_does_in_queries_that_do_not_grow(job_actor):
    """The results only, read without joins and without the submissions' own columns (an API
    call's payload can be large): nothing loads lazily per action."""

    def ended(count):
        actions = [
            ActionFactory.create(job=job_actor.job, payload={"blob": "x" * 1000})
            for _ in range(count)
        ]
        for action in actions:
            schedule(action.pk)
            finish(action.pk, exit_code=0, output=f"out {action.pk}")
        return [a.pk for a in actions]

    url = "/api/v1/actions/await/"
    job_actor.client.post(url, {"ids": ended(1)}, format="json")  # the key's first use is noted
    counts = []
    for ids in (ended(2), ended(12)):
        sql: list[str] = []

        def record(run, text, *args, sql=sql):
            sql.append(text)
            return run(text, *args)

        with connection.execute_wrapper(record):
            body = job_actor.client.post(url, {"ids": ids, "wait": 1}, format="json").json()
        counts.append(len(sql))
        assert sorted(a["id"] for a in body["ended"]) == sorted(ids) and body["pending"] == []
        reads = [text for text in sql if "actions_action" in text]
        assert reads and all("JOIN" not in t and "payload" not in t for t in reads), reads
        for rendered in body["ended"]:
            single = job_actor.client.get(f"/api/v1/actions/{rendered['id']}/result/").json()
            assert rendered == single
    assert counts[0] == counts[1], counts


@pytest.mark.django_db
def test_await_many_validates(job_actor, other_actor):
    foreign = ActionFactory.create(job=other_actor.job)
    own = ActionFactory.create(job=job_actor.job)
    url = "/api/v1/actions/await/"
    response = job_actor.client.post(url, {"ids": [own.pk, foreign.pk]}, format="json")
    assert response.status_code == 404 and "ids[1]" in error_fields(response)
    for payload, field in (({"ids": []}, "ids"), ({"ids": [own.pk], "wait": 99}, "wait")):
        bad = job_actor.client.post(url, payload, format="json")
        assert bad.status_code == 400 and field in error_fields(bad)


# --- a client that hangs up frees its long-poll at once ----------------------------------------


def _hang_up_after(hangup: Hangup, seconds: float) -> threading.Timer:
    # The bridge fires it from the event loop when the server reports http.disconnect.
    timer = threading.Timer(seconds, hangup.fire)
    timer.start()
    return timer


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", ["result", "submit", "await"])
def test_a_long_poll_ends_when_its_client_hangs_up(job_actor, endpoint):
    action = ActionFactory.create(job=job_actor.job)
    hangup = Hangup()
    started = time.monotonic()  # before the timer starts: elapsed covers its whole delay
    timer = _hang_up_after(hangup, 0.2)
    client, meta = job_actor.client, {HANGUP_KEY: hangup}
    if endpoint == "result":
        response = client.get(f"/api/v1/actions/{action.pk}/result/", {"wait": "20"}, **meta)
    elif endpoint == "submit":
        body = {"demand": {"cpu": {"min": 1, "max": 1}}}
        response = client.post("/api/v1/actions/?wait=20", body, format="json", **meta)
    else:
        response = client.post("/api/v1/actions/await/", {"ids": [action.pk], "wait": 20},
                               format="json", **meta)  # fmt: skip
    elapsed = time.monotonic() - started
    timer.join()
    assert response.status_code in (200, 201, 202), response.json()
    assert 0.2 <= elapsed < 5, f"the long-poll outlived its client by {elapsed - 0.2:.1f} s"
    assert notify.get_notifier().waiter_count() == 0  # type: ignore[attr-defined]


@pytest.mark.django_db
def test_a_client_that_hung_up_before_the_wait_does_not_wait(job_actor):
    action = ActionFactory.create(job=job_actor.job)
    hangup = Hangup()
    hangup.fire()
    started = time.monotonic()
    response = job_actor.client.get(
        f"/api/v1/actions/{action.pk}/result/", {"wait": "20"}, **{HANGUP_KEY: hangup}
    )
    assert response.status_code == 202 and time.monotonic() - started < 5
