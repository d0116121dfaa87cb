from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.actions.models import Action, ActionStatus
from tests.apps.helpers import error_fields
from tests.factories import (
    ApiQuotaFactory,
    JobFactory,
    PoolFactory,
    ServiceFactory,
    ToolFactory,
    TrajectoryFactory,
)

pytestmark = pytest.mark.django_db

CPU_DEMAND = {"cpu": {"min": 1, "max": 8}, "memory_mb": {"min": 512, "max": 512}}


def submit(actor, payload, url="/api/v1/actions/"):
    return actor.client.post(url, payload, format="json")


def test_submit_one_stays_queued_with_key_columns(job_actor):
    ToolFactory.create(name="sandbox")
    response = submit(
        job_actor,
        {
            "tool": "sandbox",
            "demand": CPU_DEMAND,
            "elasticity": {
                "resource": "cpu",
                "efficiency": [1, 0.9, 0.85, 0.8, 0.7, 0.6, 0.5, 0.5],
            },
            "single_unit_duration_s": 12.5,
            "command": "pytest -x",
            "payload": {"repo": "x"},
        },
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["status"] == "queued" and body["tool"] == "sandbox"
    assert body["allocation"] is None and body["act_s"] is None
    action = Action.objects.get(pk=body["id"])
    assert (action.key_resource, action.min_units, action.max_units) == ("cpu", 1, 8)
    assert action.job == job_actor.job
    assert action.tool is not None and action.pool == action.tool.pool
    assert action.timeout_s == 60.0  # the tool's timeout


def test_tool_template_is_the_default_demand(job_actor):
    ToolFactory.create(name="sandbox", resource_template={"cpu": {"min": 2, "max": 2}})
    body = submit(job_actor, {"tool": "sandbox"}).json()
    assert body["demand"] == {"cpu": {"min": 2, "max": 2}}


def test_default_pool_follows_the_key_resource(job_actor):
    gpu_pool = PoolFactory.create(name="gpus", kind="gpu")
    PoolFactory.create(name="cpus", kind="cpu")
    service = ServiceFactory.create(name="reward")
    body = submit(
        job_actor,
        {
            "service": service.name,
            "demand": {"gpu": {"units": [1, 2]}},
            "request": {"input_ids": [[1, 2]]},
        },
    )
    assert body.json()["pool"] == gpu_pool.name


def test_api_quota_resources(job_actor):
    ApiQuotaFactory.create(name="search")
    ok = submit(job_actor, {"demand": {"api:search": 1}})
    assert ok.status_code == 201
    unknown = submit(job_actor, {"demand": {"api:other": 1}})
    assert "demand.api:other" in error_fields(unknown)


def test_an_action_in_an_api_pool_must_name_its_http_request(job_actor):
    PoolFactory.create(name="web-apis", kind="api")
    ApiQuotaFactory.create(name="search")
    missing = submit(job_actor, {"demand": {"api:search": 1}, "pool": "web-apis"})
    assert "payload.request" in error_fields(missing)
    bad = submit(
        job_actor,
        {
            "demand": {"api:search": 1},
            "pool": "web-apis",
            "payload": {"request": {"url": "ftp://x", "method": "BREW", "timeout_s": 0}},
        },
    )
    fields = error_fields(bad)
    assert {"payload.request.url", "payload.request.method", "payload.request.timeout_s"} <= set(
        fields
    )
    request = {"method": "POST", "url": "http://127.0.0.1:9/search", "json": {"q": "loom"}}
    ok = submit(
        job_actor,
        {"demand": {"api:search": 1}, "pool": "web-apis", "payload": {"request": request}},
    )
    assert ok.status_code == 201, ok.json()


def test_idempotency_key_returns_the_same_action(job_actor):
    payload = {"demand": CPU_DEMAND, "idempotency_key": "step-1/sample-3"}
    first = submit(job_actor, payload)
    second = submit(job_actor, payload)
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["id"] == second.json()["id"]
    assert Action.objects.count() == 1


def test_idempotency_keys_are_per_job(job_actor, other_actor):
    payload = {"demand": CPU_DEMAND, "idempotency_key": "k"}
    assert submit(job_actor, payload).json()["id"] != submit(other_actor, payload).json()["id"]


@pytest.mark.parametrize(
    ("payload", "field", "fragment"),
    [
        ({"demand": {"tpu": 1}}, "demand.tpu", "unknown resource"),
        ({"demand": {"cpu": {"min": -2, "max": 1}}}, "demand.cpu.min", "≥ 0"),
        ({"demand": {"cpu": {"min": 4, "max": 2}}}, "demand.cpu.min", "≤ max (2)"),
        ({"demand": {"gpu": {"units": []}}}, "demand.gpu.units", "empty"),
        ({"demand": {"gpu": {"units": [1, -1]}}}, "demand.gpu.units[1]", "≥ 1"),
        (
            {"demand": {"cpu": 2}, "elasticity": {"resource": "cpu", "efficiency": [1, 1.5]}},
            "elasticity.efficiency[1]",
            "(0, 1]",
        ),
        (
            {"demand": {"cpu": 2}, "elasticity": {"resource": "cpu", "efficiency": [0, 1]}},
            "elasticity.efficiency[0]",
            "(0, 1]",
        ),
        ({"tool": "nope", "demand": {"cpu": 1}}, "tool", "unknown tool"),
        ({"service": "nope", "demand": {"cpu": 1}}, "service", "unknown service"),
        ({"pool": "nope", "demand": {"cpu": 1}}, "pool", "unknown resource pool"),
        ({}, "demand", "required"),
        ({"demand": {"cpu": 1}, "single_unit_duration_s": 0}, "single_unit_duration_s", "(0"),
        ({"demand": {"cpu": 1}, "timeout_s": "nan"}, "timeout_s", "valid number"),
        ({"demand": {"cpu": 1}, "trajectory": 999999}, "trajectory", "no trajectory"),
        ({"demand": {"cpu": 1}, "job": 123456}, "job", "no job"),
    ],
)
def test_bad_input_is_400_naming_field_and_reason(job_actor, payload, field, fragment):
    response = submit(job_actor, payload)
    assert response.status_code == 400, response.json()
    errors = error_fields(response)
    assert field in errors, errors
    assert fragment in errors[field]
    assert Action.objects.count() == 0


def test_trajectory_of_another_job_is_rejected(job_actor, other_actor):
    foreign = TrajectoryFactory.create(job=other_actor.job)
    own = TrajectoryFactory.create(job=job_actor.job)
    bad = submit(job_actor, {"demand": {"cpu": 1}, "trajectory": foreign.pk})
    assert "trajectory" in error_fields(bad)
    assert submit(job_actor, {"demand": {"cpu": 1}, "trajectory": own.pk}).status_code == 201


@pytest.mark.parametrize(
    ("body", "content_type", "field", "status"),
    [
        ('{"demand": {"cpu": 1', "application/json", "body", 400),
        ("demand=cpu", "application/json", "body", 400),
        ('{"demand": {"cpu": 1}, "command": "a\\u0000b"}', "application/json", "command", 400),
        ('{"demand": {"cpu": 1}, "payload": {"x": 1e400}}', "application/json", "payload.x", 400),
        ('{"demand": {"cpu": 1}, "payload": {"x": NaN}}', "application/json", "payload.x", 400),
        ("[1, 2]", "application/json", "body", 400),
        ("<xml/>", "application/xml", "Content-Type", 415),
    ],
)
def test_malformed_or_non_json_body(job_actor, body, content_type, field, status):
    response = job_actor.client.generic("POST", "/api/v1/actions/", body, content_type=content_type)
    assert response.status_code == status, response.content
    assert field in error_fields(response)


def test_staff_submits_into_a_named_job(staff_actor, job_actor):
    missing = submit(staff_actor, {"demand": {"cpu": 1}})
    assert "job" in error_fields(missing)
    response = submit(staff_actor, {"demand": {"cpu": 1}, "job": job_actor.job.pk})
    assert response.status_code == 201 and response.json()["job"] == job_actor.job.pk


def test_finished_job_refuses_submissions(job_actor):
    job_actor.job.status = "finished"
    job_actor.job.save()
    response = submit(job_actor, {"demand": {"cpu": 1}})
    assert response.status_code == 409 and "job" in error_fields(response)


# --- batch -----------------------------------------------------------------------------------


def test_batch_of_1000_is_one_bulk_insert(job_actor):
    ToolFactory.create(name="sandbox")
    items = [
        {"tool": "sandbox", "demand": {"cpu": {"min": 1, "max": 1 + i % 8}}, "command": f"t{i}"}
        for i in range(1000)
    ]
    with CaptureQueriesContext(connection) as queries:
        response = submit(job_actor, {"items": items}, url="/api/v1/actions/batch/")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["count"] == 1000 and body["created"] == 1000
    ids = [entry["id"] for entry in body["items"]]
    assert len(set(ids)) == 1000
    assert Action.objects.filter(job=job_actor.job, status=ActionStatus.QUEUED).count() == 1000
    inserts = [q for q in queries.captured_queries if q["sql"].startswith("INSERT")]
    # One INSERT on PostgreSQL; SQLite splits by its bound-parameter limit, still ≪ 1000.
    assert len(inserts) == 1 if connection.vendor == "postgresql" else len(inserts) < 100
    assert len(queries.captured_queries) < 20 + len(inserts)


def test_batch_errors_index_the_item_and_store_nothing(job_actor):
    items: list[dict[str, object]] = [{"demand": {"cpu": {"min": 1, "max": 4}}} for _ in range(30)]
    items[17] = {"demand": {"cpu": {"min": 5, "max": 4}}}
    items[21] = {"demand": {"cpu": 1}, "tool": "missing"}
    response = submit(job_actor, {"items": items}, url="/api/v1/actions/batch/")
    assert response.status_code == 400
    errors = error_fields(response)
    assert errors["items[17].demand.cpu.min"] == "must be ≤ max (4)"
    assert "unknown tool" in errors["items[21].tool"]
    assert Action.objects.count() == 0


def test_batch_idempotency_within_and_across_batches(job_actor):
    url = "/api/v1/actions/batch/"
    items = [
        {"demand": {"cpu": 1}, "idempotency_key": "a"},
        {"demand": {"cpu": 1}, "idempotency_key": "b"},
        {"demand": {"cpu": 1}, "idempotency_key": "a"},
        {"demand": {"cpu": 1}},
    ]
    first = submit(job_actor, {"items": items}, url=url).json()
    assert first["created"] == 3
    assert first["items"][0]["id"] == first["items"][2]["id"]
    assert first["items"][2]["created"] is False
    second = submit(job_actor, {"items": items[:2]}, url=url).json()
    assert second["created"] == 0
    assert [a["id"] for a in second["items"]] == [a["id"] for a in first["items"][:2]]
    assert Action.objects.count() == 3


def test_oversized_batch_is_rejected_by_count(job_actor):
    items = [{"demand": {"cpu": 1}}] * 10_001
    response = job_actor.client.generic(
        "POST",
        "/api/v1/actions/batch/",
        json.dumps({"items": items}),
        content_type="application/json",
    )
    assert response.status_code == 400
    assert error_fields(response) == {"items": "at most 10000 actions per batch, got 10001"}


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"items": []}, "items"),
        ({"items": "x"}, "items"),
        ({}, "items"),
        ({"items": [5]}, "items[0]"),
    ],
)
def test_batch_shape_errors(job_actor, payload, field):
    response = submit(job_actor, payload, url="/api/v1/actions/batch/")
    assert response.status_code == 400
    assert field in error_fields(response)


def test_batch_into_another_job_is_refused(job_actor, other_actor):
    payload = {"job": other_actor.job.pk, "items": [{"demand": {"cpu": 1}}]}
    response = submit(job_actor, payload, url="/api/v1/actions/batch/")
    assert response.status_code == 400 and "job" in error_fields(response)


def test_staff_batch_needs_a_visible_job(staff_actor):
    job = JobFactory.create()
    ok = submit(
        staff_actor, {"job": job.pk, "items": [{"demand": {"cpu": 1}}]}, "/api/v1/actions/batch/"
    )
    assert ok.status_code == 201


def test_staff_may_name_the_job_as_a_string_number(staff_actor, job_actor):
    response = submit(staff_actor, {"demand": {"cpu": 1}, "job": str(job_actor.job.pk)})
    assert response.status_code == 201 and response.json()["job"] == job_actor.job.pk


def test_batch_full_representation_is_what_a_single_submit_answers(job_actor):
    ToolFactory.create(name="sandbox")
    url = "/api/v1/actions/batch/?representation=full"
    before = submit(job_actor, {"tool": "sandbox", "idempotency_key": "old"}).json()
    items = [
        {"tool": "sandbox", "command": "echo 1", "idempotency_key": "new"},
        {"tool": "sandbox", "idempotency_key": "old"},
        {"demand": {"cpu": 1}},
    ]
    body = submit(job_actor, {"items": items}, url=url).json()
    assert body["count"] == 3 and body["created"] == 2
    created, hit, plain = body["items"]
    assert created["created"] is True and hit["created"] is False
    assert hit == before | {"created": False}
    single = submit(job_actor, {"tool": "sandbox", "command": "echo 1", "idempotency_key": "x"})
    expected_keys = set(single.json()) | {"created"}
    assert set(created) == expected_keys and set(plain) == expected_keys
    assert created["tool"] == "sandbox" and created["pool"] == single.json()["pool"]
    assert created["command"] == "echo 1" and created["status"] == "queued"
    assert created["submitted_at"] and created["idempotency_key"] == "new"


def test_batch_representation_is_validated(job_actor):
    url = "/api/v1/actions/batch/?representation=everything"
    response = submit(job_actor, {"items": [{"demand": {"cpu": 1}}]}, url=url)
    assert response.status_code == 400
    assert "representation" in error_fields(response)
    assert Action.objects.count() == 0
