from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from apps.jobs.services import api_key_revoke
from tests.apps.helpers import error_fields
from tests.factories import JobFactory, UserFactory, make_key

pytestmark = pytest.mark.django_db


def client_with(header: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    return client


def test_no_credentials_is_401_naming_authorization(anon_client):
    response = anon_client.get("/api/v1/actions/")
    assert response.status_code == 401
    assert "Authorization" in error_fields(response)
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_unknown_key_is_401_with_a_clear_reason():
    response = client_with("Bearer loom_not-a-real-key").get("/api/v1/actions/")
    assert response.status_code == 401
    assert error_fields(response) == {"Authorization": "unknown API key"}


def test_revoked_key_is_401_naming_the_key_prefix():
    key, raw = make_key(job=JobFactory.create())
    assert api_key_revoke(api_key=key)
    response = client_with(f"Bearer {raw}").get("/api/v1/actions/")
    assert response.status_code == 401
    reason = error_fields(response)["Authorization"]
    assert "revoked" in reason and key.prefix in reason


def test_malformed_bearer_header_is_401():
    response = client_with("Bearer ").get("/api/v1/jobs/")
    assert response.status_code == 401
    assert "malformed" in error_fields(response)["Authorization"]


def test_node_token_does_not_authenticate_the_api():
    response = client_with("Bearer loomnode_abc").get("/api/v1/jobs/")
    assert response.status_code == 401
    assert "heartbeat" in error_fields(response)["Authorization"]


def test_staff_key_of_a_user_no_longer_staff_is_401():
    user = UserFactory.create(is_staff=True)
    _, raw = make_key(user=user)
    user.is_staff = False
    user.save()
    response = client_with(f"Bearer {raw}").get("/api/v1/jobs/")
    assert response.status_code == 401


def test_key_records_last_use(job_actor):
    key = job_actor.job.api_keys.get()
    assert key.last_used_at is None
    assert job_actor.client.get("/api/v1/jobs/").status_code == 200
    key.refresh_from_db()
    assert key.last_used_at is not None


def test_job_key_of_a_staff_owned_job_is_not_staff(staff_actor):
    """A demo job is owned by the admin; its key must still see only its own job."""
    job = JobFactory.create(owner=staff_actor.user)
    JobFactory.create(name="someone-else")
    _, raw = make_key(job=job)
    client = client_with(f"Bearer {raw}")
    names = [item["name"] for item in client.get("/api/v1/jobs/").json()["results"]]
    assert names == [job.name]
    assert client.post("/api/v1/jobs/", {"name": "x"}, format="json").status_code == 403
