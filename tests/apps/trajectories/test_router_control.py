"""The control plane's side of the live routers: the policy an operator stores (published to
Redis for the router) and the workers' reports drained from the router's state stream."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta
from typing import Any

import pytest
import redis as redis_lib
import redis.asyncio as aioredis
from django.utils import timezone

from apps.trajectories.models import LLMWorkerReport, RouterPolicy
from apps.trajectories.router_control import (
    llm_worker_reports_apply,
    router_policies_sync,
    router_policy_set,
)
from apps.trajectories.router_state import router_state_drain
from tests.factories import UserFactory
from workers.router.registry import RegistryNames, StatePublisher

pytestmark = pytest.mark.django_db


def _entry(**worker: Any) -> dict[str, Any]:
    return {
        "event": "workers",
        "router": "r1",
        "policy": "heddle",
        "at": time.time(),
        "workers": [{"name": "w0", "url": "http://a:1", "healthy": True, "draining": False,
                     "in_flight": 2, **worker}],
    }  # fmt: skip


@pytest.mark.redis
def test_a_policy_change_is_stored_with_who_and_when_and_published(
    router_names: RegistryNames, redis_url: str, django_capture_on_commit_callbacks: Any
) -> None:
    user: Any = UserFactory(username="ops")
    with django_capture_on_commit_callbacks(execute=True):
        first = router_policy_set(router="r1", policy="round_robin", predictor="prompt_history",
                                  user=user)  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        second = router_policy_set(router="r1", policy="least_load", predictor="progressive",
                                   user=user)  # fmt: skip
    assert (first.pk, first.version, second.version) == (second.pk, 1, 2)
    row = RouterPolicy.objects.get(router="r1")
    assert (row.policy, row.predictor, row.changed_by_id) == ("least_load", "progressive", user.pk)
    assert timezone.now() - row.changed_at < timedelta(seconds=10)
    client: Any = redis_lib.Redis.from_url(redis_url)
    stored = json.loads(client.get(router_names.router_policy("r1")))
    assert stored["version"] == 2 and stored["policy"] == "least_load"
    assert stored["predictor"] == "progressive" and stored["changed_by"] == "ops"
    client.delete(router_names.router_policy("r1"))
    assert router_policies_sync() == 1  # the sync repairs a lost key
    assert json.loads(client.get(router_names.router_policy("r1")))["version"] == 2
    client.close()


def test_worker_reports_keep_the_newest_per_worker_and_skip_malformed_ones() -> None:
    old = _entry(metrics={"running_requests": 1, "queued_requests": 0, "kv_usage": 0.1})
    new = _entry(metrics={"running_requests": 4, "queued_requests": 3, "kv_usage": 0.6,
                          "kv_used_tokens": 900, "generation_tokens_per_s": 120.5})  # fmt: skip
    stored, skipped = llm_worker_reports_apply([old, new])
    assert (stored, skipped) == (1, 0)
    report = LLMWorkerReport.objects.get(router="r1", name="w0")
    assert (report.running_requests, report.queued_requests, report.kv_usage) == (4, 3, 0.6)
    assert (report.kv_used_tokens, report.in_flight) == (900, 2)
    bad = [
        _entry(metrics={"queued_requests": -1}),
        _entry(metrics={"kv_usage": "high"}),
        _entry(metrics={"running_requests": True}),
        {**_entry(), "router": ""},
        {**_entry(), "at": "now"},
        {**_entry(), "workers": "w0"},
    ]
    assert llm_worker_reports_apply(bad) == (0, 6)
    assert LLMWorkerReport.objects.get(router="r1", name="w0").queued_requests == 3
    llm_worker_reports_apply([_entry(metrics=None)])  # an engine without metrics
    report = LLMWorkerReport.objects.get(router="r1", name="w0")
    assert report.kv_usage is None and report.queued_requests is None


@pytest.mark.redis
def test_the_drain_persists_the_routers_worker_entries(
    router_names: RegistryNames, redis_url: str
) -> None:
    async def publish() -> None:
        client = aioredis.Redis.from_url(redis_url)
        publisher = StatePublisher(client, router_names)
        publisher.publish(_entry(metrics={"running_requests": 2, "kv_usage": 0.25}))
        await publisher.flush()
        await client.aclose()

    asyncio.run(publish())
    drained = router_state_drain()
    assert (drained.read, drained.applied, drained.skipped) == (1, 1, 0)
    report = LLMWorkerReport.objects.get(router="r1", name="w0")
    assert (report.running_requests, report.kv_usage) == (2, 0.25)
