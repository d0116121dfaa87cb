"""Staff CRUD of pools, services, tools and quotas; read-only for job keys."""

from __future__ import annotations

import pytest

from apps.resources.models import Tool
from tests.apps.helpers import error_fields
from tests.factories import ActionFactory, ToolFactory

pytestmark = pytest.mark.django_db


def test_staff_crud_roundtrip(staff_actor):
    client = staff_actor.client
    assert (
        client.post("/api/v1/pools/", {"name": "cpu", "kind": "cpu"}, format="json").status_code
        == 201
    )
    tool = client.post(
        "/api/v1/tools/",
        {
            "name": "swe-sandbox",
            "pool": "cpu",
            "command_template": "run --jobs {dop}",
            "resource_template": {"cpu": {"min": 1, "max": 2}},
            "elasticity": {"resource": "cpu", "efficiency": [1, 0.9]},
            "timeout_s": 300,
        },
        format="json",
    )
    assert tool.status_code == 201, tool.json()
    url = f"/api/v1/tools/{tool.json()['id']}/"
    assert client.patch(url, {"timeout_s": 30}, format="json").json()["timeout_s"] == 30
    service = client.post(
        "/api/v1/services/",
        {"name": "rm", "backend": "torch", "model": "rm-1b", "allowed_dop": [4, 1, 2]},
        format="json",
    )
    assert service.status_code == 201, service.json()
    quota = client.post(
        "/api/v1/quotas/",
        {"name": "search", "concurrency_limit": 8, "quota_per_period": 100, "period_s": 60},
        format="json",
    )
    assert quota.status_code == 201, quota.json()
    assert client.delete(url).status_code == 204
    assert not Tool.objects.exists()


@pytest.mark.parametrize(
    ("url", "payload", "field"),
    [
        ("/api/v1/tools/", {"name": "t", "resource_template": {"tpu": 1}}, "resource_template.tpu"),
        (
            "/api/v1/tools/",
            {
                "name": "t",
                "resource_template": {"cpu": 2},
                "elasticity": {"resource": "cpu", "efficiency": [1, 2]},
            },
            "elasticity.efficiency[1]",
        ),
        ("/api/v1/tools/", {"name": "t", "timeout_s": 0}, "timeout_s"),
        ("/api/v1/services/", {"name": "s", "backend": "x", "model": "m"}, "backend"),
        (
            "/api/v1/services/",
            {"name": "s", "backend": "torch", "model": "m", "allowed_dop": [0]},
            "allowed_dop",
        ),
        ("/api/v1/quotas/", {"name": "q", "concurrency_limit": 0}, "concurrency_limit"),
        ("/api/v1/quotas/", {"name": "q", "quota_per_period": 5}, "period_s"),
        ("/api/v1/pools/", {"name": "p", "kind": "tpu"}, "kind"),
    ],
)
def test_registry_validation(staff_actor, url, payload, field):
    response = staff_actor.client.post(url, payload, format="json")
    assert response.status_code == 400
    assert field in error_fields(response), error_fields(response)


def test_job_keys_read_but_do_not_write(job_actor):
    ToolFactory.create(name="visible")
    assert job_actor.client.get("/api/v1/tools/").json()["results"][0]["name"] == "visible"
    response = job_actor.client.post("/api/v1/tools/", {"name": "mine"}, format="json")
    assert response.status_code == 403


def test_deleting_a_tool_in_use_is_409(staff_actor):
    tool = ToolFactory.create()
    ActionFactory.create(tool=tool)
    response = staff_actor.client.delete(f"/api/v1/tools/{tool.pk}/")
    assert response.status_code == 409
    assert "still referenced" in error_fields(response)["id"]


def test_admin_validates_tool_templates(admin_client):
    response = admin_client.post(
        "/admin/resources/tool/add/",
        {"name": "bad", "resource_template": '{"tpu": 1}', "timeout_s": "10"},
    )
    assert response.status_code == 200  # the form comes back with the error
    assert "unknown resource" in response.content.decode()
    assert not Tool.objects.filter(name="bad").exists()
