"""Shared fixtures for the Django side: API clients for a job key, another job's key, staff."""

from __future__ import annotations

import fcntl
import tempfile
from dataclasses import dataclass
from typing import IO, Any

import pytest


@dataclass
class Actor:
    """A client that authenticates one way, and what it acts for."""

    client: Any
    job: Any = None
    raw_key: str = ""
    user: Any = None


def _bearer_client(raw_key: str) -> Any:
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    return client


@pytest.fixture
def anon_client() -> Any:
    from rest_framework.test import APIClient

    return APIClient()


@pytest.fixture
def job_actor(db: Any) -> Actor:
    from tests.factories import JobFactory, make_key

    job = JobFactory.create(name="trainer")
    _, raw_key = make_key(job=job)
    return Actor(client=_bearer_client(raw_key), job=job, raw_key=raw_key, user=job.owner)


@pytest.fixture
def other_actor(db: Any) -> Actor:
    from tests.factories import JobFactory, make_key

    job = JobFactory.create(name="other")
    _, raw_key = make_key(job=job)
    return Actor(client=_bearer_client(raw_key), job=job, raw_key=raw_key, user=job.owner)


@pytest.fixture
def staff_actor(db: Any) -> Actor:
    from tests.factories import StaffFactory, make_key

    user = StaffFactory.create(username="operator")
    _, raw_key = make_key(user=user)
    return Actor(client=_bearer_client(raw_key), raw_key=raw_key, user=user)


@pytest.fixture
def staff_session(db: Any) -> Actor:
    from rest_framework.test import APIClient

    from tests.factories import StaffFactory

    user = StaffFactory.create(username="browser-admin")
    client = APIClient()
    client.force_login(user)
    return Actor(client=client, user=user)


_DATABASE_SLOTS = 16
_held_database_slot: list[IO[str]] = []


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """Concurrent pytest runs on one machine (an edit loop beside a full run) each get a test
    database of their own: the first slot whose lock file no other live run holds. Slot 0 keeps
    the plain name, so a lone run reuses the database ``--reuse-db`` kept."""
    from pytest_django.fixtures import _set_suffix_to_test_databases

    for slot in range(_DATABASE_SLOTS):
        lock = open(f"{tempfile.gettempdir()}/loom-test-database-{slot}.lock", "w")  # noqa: SIM115
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        _held_database_slot.append(lock)  # held until this process exits
        if slot:
            _set_suffix_to_test_databases(suffix=f"slot{slot}")
        return
    pytest.exit(f"all {_DATABASE_SLOTS} test database slots are held by other pytest runs")


@pytest.fixture(autouse=True)
def _fresh_submit_catalog() -> None:
    """Each test's database is rolled back or flushed beneath the app, without the model signals
    that bump the catalog generation: start every test with a cached catalog nobody trusts."""
    from apps.resources.generation import bump

    bump()


@pytest.fixture(autouse=True)
def _fresh_key_cache() -> None:
    """Likewise for verified API keys (``apps.jobs.key_cache``): rolled-back keys, jobs and users
    send no signal, so no test inherits the rows an earlier one cached."""
    from apps.jobs import key_cache

    key_cache.clear()


@pytest.fixture
def redis_url() -> str:
    """``LOOM_TEST_REDIS_URL``; skips the test, saying why, when that Redis is unreachable."""
    import redis
    from django.conf import settings

    url: str = settings.LOOM_TEST_REDIS_URL
    try:
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()
    except redis.RedisError as exc:
        pytest.skip(f"Redis at {url} is not reachable: {exc}")
    return url
