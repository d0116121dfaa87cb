"""``apps.jobs.key_cache``: a key's next request skips the key's SELECT; a revocation, a job no
longer active, a deactivated user or a deleted key is refused on the very next request; entries
expire after the TTL (writes outside Django); in Redis mode a message on ``<prefix>:auth-changed``
empties the cache, and a process whose listener is not subscribed does not use it."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from apps.jobs import key_cache
from apps.jobs.authentication import LAST_USED_RESOLUTION, _key_row, hash_key
from apps.jobs.models import ApiKey, JobStatus
from apps.jobs.services import api_key_revoke, job_update
from tests.apps.helpers import error_fields
from tests.conftest import Actor

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(60)]

KEYS_TABLE = ApiKey._meta.db_table
JOBS_URL = "/api/v1/jobs/"
ACTIONS_URL = "/api/v1/actions/"


def key_reads(client: APIClient, url: str = JOBS_URL) -> tuple[int, int]:
    """GET ``url``: the status code and how many queries named the API-key table."""
    with CaptureQueriesContext(connection) as queries:
        status = client.get(url).status_code
    return status, sum(KEYS_TABLE in query["sql"] for query in queries.captured_queries)


def wait_for(condition: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


# --- embedded mode ---------------------------------------------------------------------------


def test_a_second_request_does_not_read_the_key(job_actor: Actor) -> None:
    assert key_reads(job_actor.client) == (200, 2)  # the SELECT, and the last_used_at touch
    assert key_reads(job_actor.client) == (200, 0)
    assert key_cache.size() == 1


def test_a_cached_staff_key_acts_as_its_user(staff_actor: Actor, job_actor: Actor) -> None:
    assert key_reads(staff_actor.client)[0] == 200
    response = staff_actor.client.post(
        ACTIONS_URL, {"demand": {"cpu": 1}, "job": job_actor.job.pk}, format="json"
    )
    assert response.status_code == 201, response.json()
    assert response.json()["job"] == job_actor.job.pk


def test_a_key_revoked_by_the_service_is_refused_next_request(job_actor: Actor) -> None:
    assert key_reads(job_actor.client)[0] == 200
    key = ApiKey.objects.get(job=job_actor.job)
    assert api_key_revoke(api_key=key)
    response = job_actor.client.get(JOBS_URL)
    assert response.status_code == 401
    reason = error_fields(response)["Authorization"]
    assert "revoked" in reason and key.prefix in reason


def test_a_finished_job_refuses_the_next_submit(job_actor: Actor) -> None:
    ok = job_actor.client.post(ACTIONS_URL, {"demand": {"cpu": 1}}, format="json")
    assert ok.status_code == 201, ok.json()
    job_update(job=job_actor.job, status=JobStatus.FINISHED)
    response = job_actor.client.post(ACTIONS_URL, {"demand": {"cpu": 1}}, format="json")
    assert response.status_code == 409
    assert "job" in error_fields(response)


def test_a_deactivated_user_s_staff_key_is_refused_next_request(staff_actor: Actor) -> None:
    assert key_reads(staff_actor.client)[0] == 200
    staff_actor.user.is_active = False
    staff_actor.user.save()
    response = staff_actor.client.get(JOBS_URL)
    assert response.status_code == 401
    assert "no longer active staff" in error_fields(response)["Authorization"]


def test_a_deleted_key_is_unknown_next_request(job_actor: Actor) -> None:
    assert key_reads(job_actor.client)[0] == 200
    ApiKey.objects.get(job=job_actor.job).delete()
    response = job_actor.client.get(JOBS_URL)
    assert response.status_code == 401
    assert error_fields(response) == {"Authorization": "unknown API key"}


def test_a_login_does_not_empty_the_cache(staff_actor: Actor) -> None:
    assert key_reads(staff_actor.client)[0] == 200
    staff_actor.user.last_login = timezone.now()
    staff_actor.user.save(update_fields=["last_login"])
    assert key_cache.size() == 1
    staff_actor.user.save(update_fields=["email"])
    assert key_cache.size() == 0


def test_unknown_keys_are_never_cached(job_actor: Actor) -> None:
    stranger = APIClient()
    stranger.credentials(HTTP_AUTHORIZATION=f"Bearer {job_actor.raw_key}x")
    assert key_reads(stranger) == (401, 1)
    assert key_reads(stranger) == (401, 1)
    assert key_cache.size() == 0


def test_a_revoked_key_is_never_cached(job_actor: Actor) -> None:
    assert api_key_revoke(api_key=ApiKey.objects.get(job=job_actor.job))
    for _ in range(2):
        status, reads = key_reads(job_actor.client)
        assert status == 401 and reads == 2  # the row, then _refuse's ORM read of why
    assert key_cache.size() == 0


def test_an_entry_older_than_the_ttl_is_read_again(
    job_actor: Actor, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert key_reads(job_actor.client)[0] == 200
    assert key_reads(job_actor.client) == (200, 0)
    later = time.monotonic() + key_cache.KEY_CACHE_TTL_S + 1
    monkeypatch.setattr(key_cache, "_clock", lambda: later)
    assert key_reads(job_actor.client) == (200, 1)  # read again; touched less than a minute ago
    assert key_reads(job_actor.client) == (200, 0)  # and cached again


def test_a_revocation_outside_django_is_honoured_after_the_ttl(
    job_actor: Actor, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert key_reads(job_actor.client)[0] == 200
    ApiKey.objects.filter(job=job_actor.job).update(revoked_at=timezone.now())  # no signal
    assert job_actor.client.get(JOBS_URL).status_code == 200  # within the TTL: not yet
    later = time.monotonic() + key_cache.KEY_CACHE_TTL_S + 1
    monkeypatch.setattr(key_cache, "_clock", lambda: later)
    response = job_actor.client.get(JOBS_URL)
    assert response.status_code == 401
    assert "revoked" in error_fields(response)["Authorization"]


def test_a_read_overtaken_by_a_change_is_not_stored(job_actor: Actor) -> None:
    key_hash = hash_key(job_actor.raw_key)
    ticket = key_cache.ticket()
    row = _key_row(key_hash)
    assert row is not None
    key_cache.clear()  # a change landed while the row was being read
    key_cache.put(key_hash, row, ticket)
    assert key_cache.get(key_hash) is None
    key_cache.put(key_hash, row, key_cache.ticket())
    assert key_cache.get(key_hash) is row


def test_a_full_cache_starts_over(job_actor: Actor, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(key_cache, "KEY_CACHE_MAX_ENTRIES", 2)
    row = _key_row(hash_key(job_actor.raw_key))
    assert row is not None
    for name in ("a", "b", "c"):
        key_cache.put(name, row, key_cache.ticket())
    assert key_cache.size() == 1 and key_cache.get("c") is row


def test_the_ttl_is_shorter_than_the_last_used_resolution() -> None:
    """A cached row is never touched: it must be read again before its last use goes stale."""
    assert timedelta(seconds=key_cache.KEY_CACHE_TTL_S) < LAST_USED_RESOLUTION


# --- Redis mode ------------------------------------------------------------------------------


@contextlib.contextmanager
def _redis_mode(
    settings: Any, monkeypatch: pytest.MonkeyPatch, url: str
) -> Iterator[key_cache.Listener]:
    """Redis mode on a prefix of this test's own; yields the process's listener, closed after."""
    monkeypatch.setattr(key_cache, "LISTENER_IDLE_S", 0.05)  # so that close() ends it at once
    settings.REDIS_URL = url
    settings.LOOM_STREAM_PREFIX = f"loomtest-{uuid.uuid4().hex[:12]}"
    listener = key_cache.listener(url)
    try:
        yield listener
    finally:
        listener.close()
        listener.thread.join(timeout=5)


@pytest.fixture
def listening(
    settings: Any, monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> Iterator[key_cache.Listener]:
    with _redis_mode(settings, monkeypatch, redis_url) as listener:
        assert listener.listening.wait(5), "the listener did not subscribe"
        yield listener


@pytest.fixture
def deaf(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[key_cache.Listener]:
    """Redis mode with nothing listening on the port: the listener never subscribes."""
    with _redis_mode(settings, monkeypatch, "redis://127.0.0.1:1/0") as listener:
        yield listener


@pytest.mark.redis
def test_a_message_from_another_process_empties_the_cache(
    listening: key_cache.Listener, redis_url: str, job_actor: Actor
) -> None:
    assert key_reads(job_actor.client)[0] == 200
    assert key_reads(job_actor.client) == (200, 0)
    assert key_cache.size() == 1
    redis.Redis.from_url(redis_url).publish(key_cache.channel(), "x")
    assert wait_for(lambda: key_cache.size() == 0)
    assert key_reads(job_actor.client) == (200, 1)


@pytest.mark.redis
def test_a_committed_revocation_is_published(
    listening: key_cache.Listener,
    redis_url: str,
    job_actor: Actor,
    django_capture_on_commit_callbacks: Any,
) -> None:
    pubsub = redis.Redis.from_url(redis_url).pubsub()
    pubsub.subscribe(key_cache.channel())
    try:
        confirmed = pubsub.get_message(timeout=5)
        assert confirmed is not None and confirmed["type"] == "subscribe"
        with django_capture_on_commit_callbacks(execute=True):
            assert api_key_revoke(api_key=ApiKey.objects.get(job=job_actor.job))
        message = pubsub.get_message(timeout=5)
        assert message is not None and message["type"] == "message"
    finally:
        pubsub.close()


@pytest.mark.redis
def test_while_the_listener_reconnects_the_cache_is_bypassed(
    listening: key_cache.Listener, job_actor: Actor, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert key_reads(job_actor.client)[0] == 200
    assert key_reads(job_actor.client) == (200, 0)
    original = redis.client.PubSub.get_message
    lost, back = threading.Event(), threading.Event()

    def flaky(self: redis.client.PubSub, *args: Any, **kwargs: Any) -> Any:
        """The listener's connection drops once, then stays down until ``back`` is set."""
        if threading.current_thread() is listening.thread:
            if not lost.is_set():
                lost.set()
                raise redis.ConnectionError("connection dropped (injected)")
            back.wait(5)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(key_cache, "LISTENER_RETRY_S", 0.01)
    monkeypatch.setattr(redis.client.PubSub, "get_message", flaky)
    assert wait_for(lambda: not listening.listening.is_set() and key_cache.size() == 0)
    for _ in range(2):
        assert key_reads(job_actor.client) == (200, 1)
    assert key_cache.ticket() is None and key_cache.size() == 0
    back.set()  # resubscribed: the cache is used again
    assert listening.listening.wait(5)
    assert key_reads(job_actor.client) == (200, 1)
    assert key_reads(job_actor.client) == (200, 0)


@pytest.mark.redis
def test_a_closed_listener_ends_and_leaves_nothing_cached(
    listening: key_cache.Listener, job_actor: Actor
) -> None:
    assert key_reads(job_actor.client)[0] == 200
    assert key_cache.size() == 1
    listening.close()
    listening.thread.join(timeout=5)
    assert not listening.thread.is_alive()
    assert key_cache.size() == 0


def test_without_a_listener_every_request_reads_the_key(
    deaf: key_cache.Listener, job_actor: Actor
) -> None:
    for _ in range(3):
        assert key_reads(job_actor.client)[0] == 200
    assert key_reads(job_actor.client) == (200, 1)
    assert not deaf.listening.is_set()
    assert key_cache.size() == 0
    assert key_cache.ticket() is None


@pytest.mark.redis
def test_a_forked_process_starts_its_own_listener(
    listening: key_cache.Listener,
    redis_url: str,
    job_actor: Actor,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert key_reads(job_actor.client)[0] == 200
    assert key_cache.size() == 1
    # What a fork looks like from the child: the listeners were started under the parent's pid.
    monkeypatch.setattr(key_cache, "_listeners_pid", -1)
    assert key_cache.get(hash_key(job_actor.raw_key)) is None
    assert key_cache.size() == 0
    fresh = key_cache.listener(redis_url)
    try:
        assert fresh is not listening and fresh.listening.wait(5)
        assert key_reads(job_actor.client)[0] == 200
        assert key_reads(job_actor.client) == (200, 0)
    finally:
        fresh.close()
        fresh.thread.join(timeout=5)
