"""Every policy field checked against every other and the pool, in one place that the REST API
and the admin use (apps/policies/validation.py): 400 naming ``settings.<field>`` and why."""

from __future__ import annotations

from typing import Any

import pytest

from apps.policies.models import Policy, PolicyKind
from apps.policies.services import PolicyInvalid, policy_create, policy_update
from apps.policies.validation import pool_dop_limits
from tests.apps.helpers import error_fields
from tests.factories import NodeFactory, PoolFactory
from workers.algorithms.tangram.policy import policy_check

pytestmark = pytest.mark.django_db


@pytest.fixture
def pool() -> Any:
    """Two CPU nodes: an action can hold at most 8 cores; every node gives 4."""
    cpu = PoolFactory(name="cpu")
    NodeFactory(pool=cpu, cores=8)
    NodeFactory(pool=cpu, cores=4)
    return cpu


def _create(client: Any, settings: Any, pool: str | None = "cpu", kind: str = "action_scheduler"):
    body = {"name": "sched", "kind": kind, "settings": settings}
    if pool is not None:
        body["pool"] = pool
    return client.post("/api/v1/policies/", body, format="json")


@pytest.mark.parametrize(
    ("settings", "field", "reason"),
    [
        ({"min_dop": 5}, "settings.min_dop", "must be ≤ 4, the most units every node"),
        ({"max_dop": 9}, "settings.max_dop", "must be ≤ 8, the most units one action"),
        ({"min_dop": 3, "max_dop": 2}, "settings.max_dop", "must be ≥ min_dop (3)"),
        ({"min_dop": 3, "max_dop": 6, "fixed_dop": 7}, "settings.fixed_dop", "between min_dop"),
        ({"fixed_dop": 9}, "settings.fixed_dop", "must be ≤ 8"),
        ({"depth": 0}, "settings.depth", "must be ≥ 1"),
        ({"depth": True}, "settings.depth", "must be a number"),
        ({"depth": 2.5}, "settings.depth", "whole number"),
        ({"depth": 2**62}, "settings.depth", "must be ≤ 16"),
        ({"max_dop": -(2**62)}, "settings.max_dop", "must be ≥ 1"),
        ({"estimate_window": 1e308}, "settings.estimate_window", "must be ≤ 65536"),
        ({"estimate_window": -1}, "settings.estimate_window", "must be ≥ 0"),
        ({"algorithm": "lifo"}, "settings.algorithm", "must be one of elastic"),
        ({"algorithm": ["elastic"]}, "settings.algorithm", "must be one of"),
        ({"pps": True}, "settings.pps", "unknown policy setting"),
        ({"quotas": {"api:x": {"quota": 2**40}}}, "settings.quotas", "must be ≤ 2147483647"),
        ({"quotas": {"api:x": {"quota": 5, "period_s": 0}}}, "settings.quotas", "period_s"),
        ({"quotas": {"search": {"quota": 5}}}, "settings.quotas", "not an API resource"),
    ],
)
def test_the_api_names_the_field_and_the_reason(
    staff_actor: Any, pool: Any, settings: dict[str, Any], field: str, reason: str
) -> None:
    response = _create(staff_actor.client, settings)
    assert response.status_code == 400, response.json()
    errors = error_fields(response)
    assert field in errors and reason in errors[field], errors
    assert not Policy.objects.exists()


@pytest.mark.parametrize("number", ["1e999", "-1e999", str(2**64), "NaN"])
def test_numbers_past_int64_or_float_range_are_a_400(
    staff_actor: Any, pool: Any, number: str
) -> None:
    response = staff_actor.client.post(
        "/api/v1/policies/",
        '{"name": "s", "kind": "action_scheduler", "pool": "cpu", "settings": {"depth": '
        + number
        + "}}",
        content_type="application/json",
    )
    assert response.status_code == 400
    assert any(
        field.startswith("settings.depth") or field == "body" for field in error_fields(response)
    )


def test_a_valid_policy_fits_the_pool_and_absent_fields_follow(staff_actor: Any, pool: Any):
    created = _create(staff_actor.client, {"min_dop": 4, "algorithm": "fixed-dop"})
    assert created.status_code == 201, created.json()
    assert created.json()["settings"] == {"min_dop": 4, "algorithm": "fixed-dop"}  # as given
    url = f"/api/v1/policies/{created.json()['id']}/"
    bad = staff_actor.client.patch(url, {"settings": {"max_dop": 64}}, format="json")
    assert bad.status_code == 400 and "settings.max_dop" in error_fields(bad)
    assert Policy.objects.get().version == 1
    clean, problems = policy_check({"min_dop": 4}, dop_limit=8, min_dop_limit=4)
    assert problems == [] and (clean["max_dop"], clean["fixed_dop"]) == (8, 4)


def test_a_pool_without_nodes_is_checked_against_the_fields_own_bounds(staff_actor: Any):
    empty: Any = PoolFactory(name="empty")
    assert pool_dop_limits(empty) == (None, None)
    assert _create(staff_actor.client, {"max_dop": 1024}, pool="empty").status_code == 201
    Policy.objects.all().delete()
    assert _create(staff_actor.client, {"max_dop": 1025}, pool="empty").status_code == 400


def test_other_kinds_are_only_checked_for_shape(staff_actor: Any) -> None:
    response = _create(staff_actor.client, {"lambda": 0.5}, pool=None, kind="buffer")
    assert response.status_code == 201


def test_services_refuse_what_the_edges_refuse(pool: Any) -> None:
    with pytest.raises(PolicyInvalid) as caught:
        policy_create(
            name="s",
            kind=PolicyKind.ACTION_SCHEDULER,
            pool=pool,
            settings={"min_dop": 6},
            author=None,
        )
    assert caught.value.errors[0]["field"] == "settings.min_dop"
    policy = policy_create(
        name="s", kind=PolicyKind.ACTION_SCHEDULER, pool=pool, settings={}, author=None
    )
    with pytest.raises(PolicyInvalid):
        policy_update(policy_id=policy.pk, settings={"max_dop": 0}, author=None)


def test_the_admin_form_shows_the_same_errors(client: Any, pool: Any) -> None:
    from django.contrib.auth.models import User

    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    response = client.post(
        "/admin/policies/policy/add/",
        {
            "name": "sched",
            "kind": "action_scheduler",
            "pool": pool.pk,
            "settings": '{"min_dop": 3, "max_dop": 2}',
            "versions-TOTAL_FORMS": "0",
            "versions-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 200  # the form again, with its errors
    assert "settings.max_dop: must be ≥ min_dop (3)" in response.content.decode()
    assert not Policy.objects.exists()
    response = client.post(
        "/admin/policies/policy/add/",
        {
            "name": "sched",
            "kind": "action_scheduler",
            "pool": pool.pk,
            "settings": '{"min_dop": 2, "max_dop": 8}',
            "versions-TOTAL_FORMS": "0",
            "versions-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302
    assert Policy.objects.get().settings == {"min_dop": 2, "max_dop": 8}
