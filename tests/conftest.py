"""Shared fixtures for the Django side: API clients for a job key, another job's key, staff."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
