"""The web side of the single-action fast path: ``POST /actions/?wait=``, the cached submit
catalog, the optimistic INSERT with its idempotency key, bearer-key authentication in one query,
and the reused output serializers."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from apps.actions import notify, pool_events, selectors, services
from apps.actions.apis import ActionOutputSerializer, ActionResultSerializer
from apps.actions.models import Action, ActionStatus
from apps.jobs import key_cache
from apps.jobs.models import ApiKey
from apps.jobs.services import api_key_revoke
from apps.resources.models import ResourcePool, Tool
from tests.apps.helpers import error_fields, run_to_success
from tests.conftest import Actor
from tests.factories import (
    ActionFactory,
    NodeFactory,
    PoolFactory,
    ServiceFactory,
    ToolFactory,
    TrajectoryFactory,
)

URL = "/api/v1/actions/"
DEMAND = {"cpu": {"min": 1, "max": 2}}


def submit(actor: Actor, payload: dict[str, Any], wait: str | None = None) -> Any:
    url = URL if wait is None else f"{URL}?wait={wait}"
    return actor.client.post(url, payload, format="json")


def _finish(action_id: int) -> None:
    run_to_success(action_id, output="done", score=0.5)


def _finish_when_submitted(job_id: int, delay: float) -> threading.Thread:
    """Like a scheduler and its agent: once the job's action exists, end it ``delay`` later."""

    def run() -> None:
        try:
            deadline = time.monotonic() + 5
            while True:
                pk = Action.objects.filter(job_id=job_id).values_list("pk", flat=True).first()
                if pk is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.01)
            if pk is not None:
                time.sleep(delay)
                _finish(pk)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


# --- 1. submit and wait ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_submit_with_wait_answers_when_the_action_ends(job_actor: Actor) -> None:
    thread = _finish_when_submitted(job_actor.job.pk, delay=0.3)
    started = time.monotonic()
    response = submit(job_actor, {"demand": DEMAND, "command": "echo"}, wait="5")
    elapsed = time.monotonic() - started
    thread.join()
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["status"] == "succeeded"
    assert (body["exit_code"], body["output"], body["score"]) == (0, "done", 0.5)
    assert body["allocation"] == {"cores": [0]} and body["attempts"] == 1
    assert body["finished_at"] is not None and body["act_s"] >= 0
    assert body["command"] == "echo" and body["job"] == job_actor.job.pk
    assert 0.3 <= elapsed < 3  # woken by the end, not by the 5 s wait running out
    assert Action.objects.get().status == ActionStatus.SUCCEEDED
    assert notify.get_notifier().waiter_count() == 0  # type: ignore[attr-defined]


@pytest.mark.django_db
def test_submit_with_wait_and_nobody_ending_it_is_201_queued(job_actor: Actor) -> None:
    started = time.monotonic()
    response = submit(job_actor, {"demand": DEMAND}, wait="0.2")
    elapsed = time.monotonic() - started
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["status"] == "queued" and body["finished_at"] is None and body["act_s"] is None
    assert 0.2 <= elapsed < 2
    assert Action.objects.filter(pk=body["id"], status=ActionStatus.QUEUED).count() == 1
    assert notify.get_notifier().waiter_count() == 0  # type: ignore[attr-defined]


@pytest.mark.django_db(transaction=True)
def test_an_end_right_after_the_announcement_is_not_slept_through(
    job_actor: Actor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The subscription precedes the announcement on both paths (fast INSERT, batch)."""
    PoolFactory.create(name="cpus", kind="cpu")  # the action has a pool, so it is announced
    announced: list[int] = []

    def instant_scheduler(pool: str, message: Any) -> None:
        # The pool's scheduler hears of the action and it ends at once (a very short action).
        for action_id in message.action_ids:
            announced.append(action_id)
            _finish(action_id)

    monkeypatch.setattr(pool_events, "publish", instant_scheduler)
    started = time.monotonic()
    response = submit(job_actor, {"demand": DEMAND}, wait="1.5")
    elapsed = time.monotonic() - started
    assert response.status_code == 201, response.json()
    assert announced == [response.json()["id"]]
    assert response.json()["status"] == "succeeded"
    assert elapsed < 1.0, f"waited {elapsed:.2f} s for an action that had already ended"


# --- 2. the wait is validated before anything is stored --------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("wait", ["-1", "61", "abc", "nan", "inf", "1e400"])
def test_bad_wait_is_400_and_stores_nothing(job_actor: Actor, wait: str) -> None:
    response = submit(job_actor, {"demand": DEMAND}, wait=wait)
    assert response.status_code == 400, response.json()
    assert "wait" in error_fields(response)
    assert Action.objects.count() == 0


@pytest.mark.django_db
def test_wait_0_answers_at_once(job_actor: Actor) -> None:
    started = time.monotonic()
    response = submit(job_actor, {"demand": DEMAND}, wait="0")
    assert time.monotonic() - started < 0.5
    assert response.status_code == 201, response.json()
    assert response.json()["status"] == "queued"


@pytest.mark.django_db
def test_wait_60_is_accepted_and_an_ended_action_is_not_waited_for(
    job_actor: Actor, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_submit = services.action_submit

    def cancelled_on_insert(*, job: Any, spec: Any, before_announce: Any, **options: Any) -> Any:
        submitted = real_submit(job=job, spec=spec, before_announce=before_announce, **options)
        services.action_cancel(action_id=submitted.action.pk, reason="stop")
        submitted.action.refresh_from_db()
        return submitted

    monkeypatch.setattr(services, "action_submit", cancelled_on_insert)
    started = time.monotonic()
    response = submit(job_actor, {"demand": DEMAND}, wait="60")
    assert time.monotonic() - started < 2  # ended before the wait: no wait at all
    assert response.status_code == 201, response.json()
    assert response.json()["status"] == "cancelled"
    assert response.json()["error_reason"] == "stop"


# --- 3. the cached catalog -------------------------------------------------------------------


@pytest.mark.django_db
def test_a_pool_and_tool_created_after_the_catalog_was_cached_are_accepted(
    job_actor: Actor,
) -> None:
    assert submit(job_actor, {"demand": DEMAND}).status_code == 201
    cached = selectors.submit_catalog()
    assert selectors.submit_catalog() is cached  # the first submit loaded it; it is reused
    pool = PoolFactory.create(name="late-pool", kind="cpu")
    ToolFactory.create(name="late-tool", pool=pool)
    # The signals bumped the generation: the cache itself knows them, no retry needed.
    refreshed = selectors.submit_catalog()
    assert refreshed is not cached
    assert "late-pool" in refreshed.pools and "late-tool" in refreshed.tools
    by_pool = submit(job_actor, {"demand": DEMAND, "pool": "late-pool"})
    assert by_pool.status_code == 201, by_pool.json()
    assert by_pool.json()["pool"] == "late-pool"
    by_tool = submit(job_actor, {"tool": "late-tool"})
    assert by_tool.status_code == 201, by_tool.json()
    assert (by_tool.json()["tool"], by_tool.json()["pool"]) == ("late-tool", "late-pool")


@pytest.mark.django_db
def test_a_pool_renamed_behind_the_signals_is_found_by_its_new_name(job_actor: Actor) -> None:
    pool = PoolFactory.create(name="old-name", kind="cpu")
    assert submit(job_actor, {"demand": DEMAND, "pool": "old-name"}).status_code == 201
    assert "old-name" in selectors.submit_catalog().pools  # cached with the old name
    ResourcePool.objects.filter(pk=pool.pk).update(name="new-name")  # no signal, no bump
    renamed = submit(job_actor, {"demand": DEMAND, "pool": "new-name"})
    assert renamed.status_code == 201, renamed.json()
    assert renamed.json()["pool"] == "new-name"
    assert Action.objects.get(pk=renamed.json()["id"]).pool_id == pool.pk
    old = submit(job_actor, {"demand": DEMAND, "pool": "old-name"})
    assert old.status_code == 400, old.json()
    assert "unknown resource pool 'old-name'" in error_fields(old)["pool"]
    assert Action.objects.count() == 2


@pytest.mark.django_db
def test_a_pool_renamed_behind_the_signals_loses_its_old_name_once_the_cache_ages(
    job_actor: Actor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(selectors, "CATALOG_MAX_AGE_S", 0.05)
    pool = PoolFactory.create(name="old-name", kind="cpu")
    assert submit(job_actor, {"demand": DEMAND, "pool": "old-name"}).status_code == 201
    ResourcePool.objects.filter(pk=pool.pk).update(name="new-name")  # no signal, no bump
    time.sleep(0.1)
    old = submit(job_actor, {"demand": DEMAND, "pool": "old-name"})
    assert old.status_code == 400, old.json()
    assert "unknown resource pool 'old-name'" in error_fields(old)["pool"]
    # With no catalog write in between, the next submits also name it by its new name.
    renamed = submit(job_actor, {"demand": DEMAND})
    assert renamed.status_code == 201 and renamed.json()["pool"] == "new-name"


@pytest.mark.django_db(transaction=True)
def test_a_plain_submit_names_pool_and_tool_without_reading_them(job_actor: Actor) -> None:
    pool = PoolFactory.create(name="cpus", kind="cpu")
    ToolFactory.create(name="sandbox", pool=pool)
    # Warm up: loads the catalog and touches the key's last_used_at.
    assert submit(job_actor, {"tool": "sandbox"}).status_code == 201
    with CaptureQueriesContext(connection) as queries:
        response = submit(job_actor, {"tool": "sandbox", "command": "pytest"})
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["tool"], body["pool"], body["service"], body["node"]) == (
        "sandbox",
        "cpus",
        None,
        None,
    )
    sql = [query["sql"] for query in queries.captured_queries]
    catalog_tables = [model._meta.db_table for model in (ResourcePool, Tool)]
    assert not [q for q in sql if any(table in q for table in catalog_tables)], sql
    statements = [q.split(None, 1)[0].upper() for q in sql]
    # The key comes from the per-process key cache (apps.jobs.key_cache), warmed up above.
    if connection.vendor == "postgresql":
        # One INSERT, in autocommit: nothing else.
        assert statements == ["INSERT"], sql
    else:
        # The batch path: the INSERT in a transaction of its own.
        assert statements == ["BEGIN", "INSERT", "COMMIT"], sql


# --- 4. idempotency --------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_same_idempotency_key_twice_is_one_action(job_actor: Actor) -> None:
    PoolFactory.create(name="cpus", kind="cpu")
    first = submit(job_actor, {"demand": DEMAND, "command": "a", "idempotency_key": "k-1"})
    second = submit(job_actor, {"demand": DEMAND, "command": "b", "idempotency_key": "k-1"})
    assert (first.status_code, second.status_code) == (201, 200), second.json()
    assert second.json()["id"] == first.json()["id"]
    assert second.json()["command"] == "a"  # the existing action, not the repeat's payload
    assert second.json()["pool"] == first.json()["pool"] == "cpus"
    assert Action.objects.filter(job=job_actor.job).count() == 1
    # Another key is another action.
    third = submit(job_actor, {"demand": DEMAND, "idempotency_key": "k-2"})
    assert third.status_code == 201 and third.json()["id"] != first.json()["id"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["single", "batch"])
def test_a_replayed_key_announces_its_action_again_while_it_is_queued(
    job_actor: Actor, path: str
) -> None:
    """The web may die between its commit and its announcement; the client's retry then lands
    on the existing action, which is announced again (by id: the scheduler reads the row)."""
    pool = PoolFactory.create(name="cpus", kind="cpu")
    heard: list[tuple[str, Any]] = []

    def route(pool_name: str, message: Any) -> None:
        heard.append((pool_name, message))

    def send() -> Any:
        item = {"demand": DEMAND, "command": "a", "idempotency_key": "k-replay"}
        if path == "single":
            return submit(job_actor, item)
        return job_actor.client.post(URL + "batch/", {"items": [item, item]}, format="json")

    pool_events.in_process_route_set(route)
    try:
        assert send().status_code in (200, 201)
        action = Action.objects.get(job=job_actor.job)
        first = [m for _, m in heard]
        assert len(first) == 1 and first[0].action_ids == (action.pk,)
        heard.clear()
        assert send().status_code in (200, 201)
        assert [(name, m.action_ids, m.records) for name, m in heard] == [
            (pool.name, (action.pk,), ())
        ]
        heard.clear()
        Action.objects.filter(pk=action.pk).update(
            status=ActionStatus.CANCELLED, finished_at=timezone.now(), error_reason="cancelled"
        )
        assert send().status_code in (200, 201)
        assert heard == []  # no longer queued: nothing to announce
    finally:
        pool_events.in_process_route_clear(route)


@pytest.mark.django_db(transaction=True)
def test_two_submitters_racing_one_idempotency_key(job_actor: Actor, postgres_only: None) -> None:
    barrier = threading.Barrier(2)
    results: list[tuple[int, dict[str, Any]]] = []
    errors: list[BaseException] = []

    def race() -> None:
        try:
            client = APIClient()
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {job_actor.raw_key}")
            barrier.wait(timeout=5)
            response = client.post(
                URL, {"demand": DEMAND, "idempotency_key": "raced"}, format="json"
            )
            results.append((response.status_code, response.json()))
        except BaseException as error:  # reported by the test thread
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=race) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert not errors, errors
    assert sorted(code for code, _ in results) == [200, 201], results
    assert len({body["id"] for _, body in results}) == 1
    assert Action.objects.filter(job=job_actor.job, idempotency_key="raced").count() == 1


# --- 5. bearer-key authentication ------------------------------------------------------------


def _client(raw_key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    return client


@pytest.mark.django_db
def test_an_unknown_key_is_401(job_actor: Actor) -> None:
    response = _client(job_actor.raw_key + "x").post(URL, {"demand": DEMAND}, format="json")
    assert response.status_code == 401
    assert error_fields(response) == {"Authorization": "unknown API key"}
    assert Action.objects.count() == 0


@pytest.mark.django_db
def test_a_revoked_key_is_401_saying_so(job_actor: Actor) -> None:
    assert job_actor.client.get(URL).status_code == 200  # verified, so cached
    key = ApiKey.objects.get(job=job_actor.job)
    assert api_key_revoke(api_key=key)
    response = submit(job_actor, {"demand": DEMAND})
    assert response.status_code == 401
    reason = error_fields(response)["Authorization"]
    assert "revoked" in reason and key.prefix in reason
    assert Action.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize("flag", ["is_staff", "is_active"])
def test_a_staff_key_of_a_user_no_longer_active_staff_is_401(
    staff_actor: Actor, job_actor: Actor, flag: str
) -> None:
    ok = submit(staff_actor, {"demand": DEMAND, "job": job_actor.job.pk})
    assert ok.status_code == 201, ok.json()
    setattr(staff_actor.user, flag, False)
    staff_actor.user.save()
    response = submit(staff_actor, {"demand": DEMAND, "job": job_actor.job.pk})
    assert response.status_code == 401
    assert "no longer active staff" in error_fields(response)["Authorization"]
    assert Action.objects.count() == 1


@pytest.mark.django_db
def test_last_used_at_is_touched_at_most_once_a_minute(job_actor: Actor) -> None:
    key = ApiKey.objects.get(job=job_actor.job)
    assert key.last_used_at is None
    assert job_actor.client.get(URL).status_code == 200
    key.refresh_from_db()
    first = key.last_used_at
    assert first is not None
    key_cache.clear()  # as the cache's TTL would: the next request reads the key again
    assert job_actor.client.get(URL).status_code == 200
    key.refresh_from_db()
    assert key.last_used_at == first  # within the minute: not rewritten
    stale = timezone.now() - timedelta(minutes=2)
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=stale)
    key_cache.clear()
    assert job_actor.client.get(URL).status_code == 200
    key.refresh_from_db()
    assert key.last_used_at is not None and key.last_used_at > first


# --- 6. reused serializers render what the serializers do ------------------------------------


@pytest.mark.django_db
def test_render_equals_the_serializers_data(job_actor: Actor) -> None:
    pool = PoolFactory.create(name="cpus", kind="cpu")
    tool = ToolFactory.create(name="sandbox", pool=pool)
    node = NodeFactory.create(name="node-a", pool=pool)
    now = timezone.now()
    finished = ActionFactory.create(
        job=job_actor.job,
        trajectory=TrajectoryFactory.create(job=job_actor.job),
        tool=tool,
        pool=pool,
        node=node,
        command="pytest -x",
        payload={"repo": "x", "n": [1, 2]},
        status=ActionStatus.SUCCEEDED,
        allocation={"cores": [0, 1], "memory_mb": 512},
        attempts=1,
        submitted_at=now - timedelta(seconds=3),
        scheduled_at=now - timedelta(seconds=2),
        started_at=now - timedelta(seconds=1.5),
        finished_at=now,
        exit_code=0,
        output="ok\nall passed",
        score=0.875,
        idempotency_key="k",
    )
    by_service = ActionFactory.create(
        job=job_actor.job, service=ServiceFactory.create(name="reward"), pool=pool
    )
    queued = ActionFactory.create(job=job_actor.job)
    actions = list(
        Action.objects.filter(pk__in=[finished.pk, by_service.pk, queued.pk])
        .select_related("tool", "service", "pool", "node")
        .order_by("pk")
    )
    for action in actions:
        for serializer in (ActionOutputSerializer, ActionResultSerializer):
            rendered = serializer.render(action)
            expected = serializer(action).data
            assert rendered == expected
            assert list(rendered) == list(expected)  # same fields, same order
    for serializer in (ActionOutputSerializer, ActionResultSerializer):
        assert serializer.render_many(actions) == serializer(actions, many=True).data
    output = ActionOutputSerializer.render(actions[0])
    assert (output["tool"], output["pool"], output["node"]) == ("sandbox", "cpus", "node-a")
    assert output["allocation"] == {"cores": [0, 1], "memory_mb": 512}
    assert output["act_s"] == pytest.approx(3.0)
    assert ActionOutputSerializer.render(actions[1])["service"] == "reward"
    assert set(ActionResultSerializer.render(actions[0])) == set(ActionResultSerializer.Meta.fields)


# --- 7. another job's result is a quick 404 --------------------------------------------------


@pytest.mark.django_db
def test_waiting_for_another_jobs_result_is_an_immediate_404(
    job_actor: Actor, other_actor: Actor
) -> None:
    foreign = ActionFactory.create(job=other_actor.job)
    started = time.monotonic()
    response = job_actor.client.get(f"{URL}{foreign.pk}/result", {"wait": "1"})
    elapsed = time.monotonic() - started
    assert response.status_code == 404, response.json()
    assert elapsed < 0.9
    assert notify.get_notifier().waiter_count() == 0  # type: ignore[attr-defined]
    own = other_actor.client.get(f"{URL}{foreign.pk}/result", {"wait": "0"})
    assert own.status_code == 202  # it exists; it is only invisible to the other job
