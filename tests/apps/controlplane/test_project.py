"""The project as a whole: migrations, schema and docs, ASGI routing, admin, demo command."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from django.contrib.admin.sites import site
from django.core.management import call_command

from apps.jobs.authentication import hash_key
from apps.jobs.models import ApiKey, Job
from tests.factories import (
    ActionFactory,
    ApiQuotaFactory,
    BufferFactory,
    NodeFactory,
    PolicyFactory,
    ServiceFactory,
    ToolFactory,
    TrajectoryFactory,
    TriggerFactory,
)

pytestmark = pytest.mark.django_db


def test_migrations_are_complete():
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


def test_schema_and_offline_docs(client):
    schema = client.get("/api/v1/schema/?format=json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    for path in [
        "/api/v1/jobs/",
        "/api/v1/actions/",
        "/api/v1/actions/batch/",
        "/api/v1/actions/{action_id}/result/",
        "/api/v1/nodes/register/",
        "/api/v1/nodes/{node_id}/heartbeat/",
        "/api/v1/policies/{id}/versions/",
    ]:
        assert path in paths, path
    docs = client.get("/api/v1/docs/")
    assert docs.status_code == 200
    html = docs.content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+\.(?:js|css))"', html)
    assert assets and all(asset.startswith("/static/") for asset in assets), assets
    for asset in assets:
        response = client.get(asset)
        assert response.status_code == 200, asset
        b"".join(response.streaming_content)
        response.close()


def test_unknown_api_url_is_a_json_404(client):
    response = client.get("/api/v1/nope/")
    assert response.status_code == 404
    assert response.json()["errors"][0]["field"] == "path"


async def test_asgi_routes_http_to_django():
    import httpx

    from controlplane.asgi import application

    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        response = await client.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_every_model_has_a_working_admin_changelist(admin_client):
    ActionFactory.create(tool=ToolFactory.create(), trajectory=TrajectoryFactory.create())
    ServiceFactory.create()
    ApiQuotaFactory.create()
    NodeFactory.create()
    PolicyFactory.create()
    TriggerFactory.create(buffer=BufferFactory.create())
    from django.apps import apps

    ours = [m for m in apps.get_models() if m.__module__.startswith("apps.")]
    ours = [
        m
        for m in ours
        if m._meta.app_label
        in {"jobs", "actions", "trajectories", "resources", "policies", "buffers"}
    ]
    assert len(ours) == 17
    for model in ours:
        assert model in site._registry, model
        url = f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
        assert admin_client.get(url).status_code == 200, url
        assert admin_client.get(url, {"q": "x"}).status_code == 200, url


def test_admin_shows_a_new_key_once_and_revokes(admin_client):
    from tests.factories import JobFactory

    job = JobFactory.create()
    response = admin_client.post(
        "/admin/jobs/apikey/add/", {"name": "ci", "job": job.pk, "user": ""}, follow=True
    )
    assert response.status_code == 200
    messages = [str(m) for m in response.context["messages"]]
    raw = next(m.split(": ", 1)[1] for m in messages if "shown only now" in m)
    key = ApiKey.objects.get(job=job)
    assert key.key_hash == hash_key(raw)
    revoke = admin_client.post(
        "/admin/jobs/apikey/",
        {"action": "revoke_keys", "_selected_action": [key.pk]},
        follow=True,
    )
    assert revoke.status_code == 200
    key.refresh_from_db()
    assert key.revoked_at is not None


def test_admin_policy_edit_is_versioned(admin_client, admin_user):
    policy_url = "/admin/policies/policy/add/"
    response = admin_client.post(
        policy_url,
        {
            "name": "gpu",
            "kind": "action_scheduler",
            "settings": '{"depth": 1}',
            "versions-TOTAL_FORMS": "0",
            "versions-INITIAL_FORMS": "0",
        },
        follow=True,
    )
    assert response.status_code == 200
    from apps.policies.models import Policy

    policy = Policy.objects.get(name="gpu")
    assert policy.versions.get().author == admin_user


def test_demo_command_sets_up_and_reprints(tmp_path, settings):
    settings.VAR_DIR = tmp_path
    out = io.StringIO()
    call_command("demo", "--no-serve", stdout=out)
    first = out.getvalue()
    password = (Path(tmp_path) / "admin_password").read_text().strip()
    raw_key = (Path(tmp_path) / "demo_api_key").read_text().strip()
    assert password in first and raw_key in first
    assert "/api/v1/docs/" in first and "/admin/" in first and "curl" in first
    job = Job.objects.get(name="demo")
    assert ApiKey.objects.get(job=job).key_hash == hash_key(raw_key)

    out = io.StringIO()
    call_command("demo", "--no-serve", stdout=out)
    assert password in out.getvalue() and raw_key in out.getvalue()
    assert ApiKey.objects.filter(job=job).count() == 1


def test_demo_ctrl_c_stops_with_a_line_not_a_traceback(tmp_path, settings, monkeypatch):
    from apps.embedded.management.commands import demo

    def interrupted(main):  # what asyncio.run does on SIGINT once the serving has stopped
        main.close()
        raise KeyboardInterrupt

    monkeypatch.setattr(demo.asyncio, "run", interrupted)
    settings.VAR_DIR = tmp_path
    out = io.StringIO()
    call_command("demo", stdout=out)
    assert out.getvalue().rstrip().endswith("stopped")
