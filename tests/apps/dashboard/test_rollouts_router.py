"""The Rollouts page's live routers: the workers' reported load, and the policy an operator
sets (stored, published, 400 naming the field, the admin role to change it)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.trajectories.models import LLMWorkerReport, RouterPolicy
from tests.apps.dashboard.plane_data import rollout

API = "/dashboard/api"


def _report(name: str, *, age_s: float = 0.0, **fields: Any) -> LLMWorkerReport:
    return LLMWorkerReport.objects.create(
        router="r1", name=name, reported_at=timezone.now() - timedelta(seconds=age_s), **fields
    )


def test_workers_show_the_reported_kv_use_and_queue(operator_client: Any, job: Any) -> None:
    rollout(job)
    _report("w0", running_requests=3, queued_requests=5, kv_usage=0.4, kv_used_tokens=4000)
    _report("w2", running_requests=0, queued_requests=0, kv_usage=0.0)  # holds no trajectory
    _report("w1", age_s=120, queued_requests=9)  # stale: not shown as current
    body = operator_client.get(f"{API}/rollouts").json()
    workers = {w["name"]: w for w in body["workers"]}
    assert (workers["w0"]["queued_requests"], workers["w0"]["kv_usage"]) == (5, 0.4)
    assert workers["w0"]["router"] == "r1" and workers["w0"]["trajectories"] == 2
    assert workers["w2"]["trajectories"] == 0 and workers["w2"]["kv_usage"] == 0.0
    assert workers["w1"]["queued_requests"] is None and workers["w1"]["reported_at"] is None
    assert body["missing"] == []
    assert body["routers"]["unset"] == ["r1"]


def test_the_reports_cost_the_same_queries_however_many(operator_client: Any, job: Any) -> None:
    rollout(job)
    _report("w0", kv_usage=0.1)

    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert operator_client.get(f"{API}/rollouts").status_code == 200
        return len(queries)

    count()
    before = count()
    for index in range(5):
        _report(f"x{index}", kv_usage=0.2)
    RouterPolicy.objects.create(router="r9", policy="heddle", predictor="prompt_history",
                                changed_at=timezone.now())  # fmt: skip
    assert count() == before


@pytest.mark.redis
def test_an_admin_sets_a_routers_policy(
    admin_client: Any,
    admin_user: Any,
    router_names: Any,
    redis_url: str,
    django_capture_on_commit_callbacks: Any,
) -> None:
    import json

    import redis

    with django_capture_on_commit_callbacks(execute=True):  # published once it commits
        answer = admin_client.post(
            f"{API}/rollouts/routers/r1/policy",
            {"policy": "round_robin", "predictor": "progressive"},
            format="json",
        )
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert (body["policy"], body["predictor"], body["version"]) == ("round_robin", "progressive", 1)
    assert body["changed_by"] == admin_user.get_username()
    listed = admin_client.get(f"{API}/rollouts/routers").json()
    assert [p["router"] for p in listed["policies"]] == ["r1"]
    assert {c["value"] for c in listed["policy_choices"]} == {"heddle", "round_robin", "least_load"}
    client: Any = redis.Redis.from_url(redis_url)
    stored = json.loads(client.get(router_names.router_policy("r1")))
    assert stored["policy"] == "round_robin" and stored["version"] == 1


def test_bad_policy_input_is_a_400_naming_the_field(admin_client: Any) -> None:
    for body, field in (
        ({"policy": "fastest"}, "policy"),
        ({}, "policy"),
        ({"policy": "heddle", "predictor": "oracle"}, "predictor"),
        ({"policy": 3}, "policy"),
    ):
        answer = admin_client.post(f"{API}/rollouts/routers/r1/policy", body, format="json")
        assert answer.status_code == 400
        assert field in {e["field"] for e in answer.json()["errors"]}, answer.json()
    long_name = "r" * 101
    answer = admin_client.post(
        f"{API}/rollouts/routers/{long_name}/policy", {"policy": "heddle"}, format="json"
    )
    assert answer.status_code == 400 and answer.json()["errors"][0]["field"] == "router"
    assert not RouterPolicy.objects.exists()


def test_an_operator_may_look_but_not_change(operator_client: Any, roleless_user: Any) -> None:
    assert operator_client.get(f"{API}/rollouts/routers").status_code == 200
    answer = operator_client.post(
        f"{API}/rollouts/routers/r1/policy", {"policy": "heddle"}, format="json"
    )
    assert answer.status_code == 403
    assert not RouterPolicy.objects.exists()
