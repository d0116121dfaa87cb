from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from apps.jobs.models import ApiKey, Job
from tests.apps.helpers import error_fields

pytestmark = pytest.mark.django_db


def test_staff_creates_a_job_and_gets_its_key_once(staff_actor):
    response = staff_actor.client.post(
        "/api/v1/jobs/",
        {"name": "grpo-7b", "resource_quota": {"cpu": 64}, "policy_overrides": {"depth": 3}},
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["name"] == "grpo-7b" and body["owner"] == "operator"
    assert body["api_key"].startswith("loom_")
    key = ApiKey.objects.get(job_id=body["id"])
    assert key.key_hash != body["api_key"] and body["api_key"].startswith(key.prefix)

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {body['api_key']}")
    assert client.get(f"/api/v1/jobs/{body['id']}/").json()["name"] == "grpo-7b"
    keys = staff_actor.client.get(f"/api/v1/jobs/{body['id']}/keys/").json()
    assert "api_key" not in keys[0] and keys[0]["prefix"] == key.prefix


def test_session_staff_can_create_jobs(staff_session):
    response = staff_session.client.post("/api/v1/jobs/", {"name": "from-browser"}, format="json")
    assert response.status_code == 201


def test_job_key_cannot_create_jobs(job_actor):
    response = job_actor.client.post("/api/v1/jobs/", {"name": "sneaky"}, format="json")
    assert response.status_code == 403
    assert "Authorization" in error_fields(response)


def test_duplicate_job_name_is_409(staff_actor, job_actor):
    response = staff_actor.client.post("/api/v1/jobs/", {"name": "trainer"}, format="json")
    assert response.status_code == 409
    assert "already exists" in error_fields(response)["name"]


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"name": "bad name!"}, "name"),
        ({"name": "ok", "resource_quota": {"tpu": 1}}, "resource_quota.tpu"),
        ({"name": "ok", "resource_quota": {"cpu": -1}}, "resource_quota.cpu"),
        ({"name": "ok", "policy_overrides": [1, 2]}, "policy_overrides"),
    ],
)
def test_bad_job_input_names_the_field(staff_actor, payload, field):
    response = staff_actor.client.post("/api/v1/jobs/", payload, format="json")
    assert response.status_code == 400
    assert field in error_fields(response)


def test_job_key_sees_only_its_job(job_actor, other_actor):
    listed = job_actor.client.get("/api/v1/jobs/").json()["results"]
    assert [job["name"] for job in listed] == ["trainer"]
    response = job_actor.client.get(f"/api/v1/jobs/{other_actor.job.pk}/")
    assert response.status_code == 404
    assert "job_id" in error_fields(response)


def test_staff_sees_all_jobs(staff_actor, job_actor, other_actor):
    listed = staff_actor.client.get("/api/v1/jobs/").json()["results"]
    assert {job["name"] for job in listed} == {"trainer", "other"}


def test_job_key_updates_its_policy_overrides(job_actor):
    url = f"/api/v1/jobs/{job_actor.job.pk}/"
    response = job_actor.client.patch(url, {"policy_overrides": {"pps": False}}, format="json")
    assert response.status_code == 200
    assert Job.objects.get(pk=job_actor.job.pk).policy_overrides == {"pps": False}


def test_job_key_cannot_change_its_quota_or_status(job_actor):
    url = f"/api/v1/jobs/{job_actor.job.pk}/"
    response = job_actor.client.patch(url, {"resource_quota": {"cpu": 999}}, format="json")
    assert response.status_code == 403
    assert "resource_quota" in error_fields(response)


def test_job_key_cannot_update_another_job(job_actor, other_actor):
    url = f"/api/v1/jobs/{other_actor.job.pk}/"
    response = job_actor.client.patch(url, {"policy_overrides": {}}, format="json")
    assert response.status_code == 404


def test_staff_creates_and_revokes_keys(staff_actor, job_actor):
    base = f"/api/v1/jobs/{job_actor.job.pk}/keys/"
    created = staff_actor.client.post(base, {"name": "second"}, format="json")
    assert created.status_code == 201
    new_key = created.json()
    revoke_url = f"{base}{new_key['id']}/revoke/"
    assert staff_actor.client.post(revoke_url).status_code == 200
    again = staff_actor.client.post(revoke_url)
    assert again.status_code == 409
    assert "already revoked" in error_fields(again)["key_id"]

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {new_key['api_key']}")
    assert client.get("/api/v1/jobs/").status_code == 401


def test_job_key_cannot_mint_or_revoke_keys(job_actor):
    base = f"/api/v1/jobs/{job_actor.job.pk}/keys/"
    assert job_actor.client.post(base, {}, format="json").status_code == 403
    key = job_actor.job.api_keys.get()
    assert job_actor.client.post(f"{base}{key.pk}/revoke/").status_code == 403
