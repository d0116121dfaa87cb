"""The contract between the control plane and the router: job keys created, revoked and deleted
through ``apps.jobs`` are what the router's registry accepts (``apps.jobs.router_keys``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis

from apps.jobs import services
from apps.jobs.router_keys import router_keys_sync
from tests.factories import JobFactory, StaffFactory, make_key
from workers.router.registry import Registry, RegistryNames

pytestmark = [pytest.mark.redis, pytest.mark.django_db]


async def router_sees(redis_url: str, names: RegistryNames, raw_key: str) -> str | None:
    client = aioredis.Redis.from_url(redis_url)
    try:
        return await Registry(client, names).job_of_key(raw_key)
    finally:
        await client.aclose()


def test_created_keys_reach_the_router_and_revoked_or_deleted_ones_leave(
    router_names: RegistryNames, redis_url: str, django_capture_on_commit_callbacks: Any
) -> None:

    job = JobFactory.create()
    with django_capture_on_commit_callbacks(execute=True):
        _, kept_raw = make_key(job=job)
        revoked, revoked_raw = make_key(job=job)
        deleted, deleted_raw = make_key(job=job)
        _, staff_raw = make_key(user=StaffFactory.create())
    seen = [
        asyncio.run(router_sees(redis_url, router_names, raw)) for raw in (kept_raw, revoked_raw)
    ]
    assert seen == [str(job.pk), str(job.pk)]
    assert asyncio.run(router_sees(redis_url, router_names, staff_raw)) is None  # jobs only
    with django_capture_on_commit_callbacks(execute=True):
        services.api_key_revoke(api_key=revoked)
        deleted.delete()
    for raw in (revoked_raw, deleted_raw):
        assert asyncio.run(router_sees(redis_url, router_names, raw)) is None
    assert asyncio.run(router_sees(redis_url, router_names, kept_raw)) == str(job.pk)


def test_sync_rebuilds_the_hash_from_the_database(
    router_names: RegistryNames, redis_url: str
) -> None:

    job = JobFactory.create()
    _, raw = make_key(job=job)  # its publication never commits (the test's transaction)
    assert asyncio.run(router_sees(redis_url, router_names, raw)) is None
    assert router_keys_sync() == 1
    assert asyncio.run(router_sees(redis_url, router_names, raw)) == str(job.pk)
