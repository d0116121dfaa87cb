"""The admin checks buffer and trigger definitions with the API's rules."""

from __future__ import annotations

import json
from typing import Any

import pytest

from apps.buffers.models import Buffer, Trigger
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

SCHEMA = {"obs": {"shape": [4], "dtype": "float32"}}
PREFIX = "triggers"


def add_form(job_id: int, **overrides: Any) -> dict[str, Any]:
    triggers = overrides.pop("triggers", [])
    form: dict[str, Any] = {
        "job": job_id,
        "name": "rollout",
        "schema": json.dumps(SCHEMA),
        "capacity": 64,
        "eviction": "keep_unsampled",
        "sampler": "full_batch",
        "sync_mode": "on_policy",
        "config": "{}",
        f"{PREFIX}-TOTAL_FORMS": len(triggers),
        f"{PREFIX}-INITIAL_FORMS": 0,
        f"{PREFIX}-MIN_NUM_FORMS": 0,
        f"{PREFIX}-MAX_NUM_FORMS": 1000,
        **overrides,
    }
    for index, trigger in enumerate(triggers):
        for field, value in trigger.items():
            form[f"{PREFIX}-{index}-{field}"] = json.dumps(value) if field == "params" else value
    return form


def errors_of(response: Any) -> str:
    assert response.status_code == 200, "the form was accepted"
    return str(response.content.decode())


def test_admin_adds_a_buffer_with_its_triggers(admin_client):
    job = JobFactory.create()
    learn = {"name": "learn", "kind": "data_key", "params": {"n": 2, "size": 8, "keys": ["obs"]}}
    response = admin_client.post(
        "/admin/buffers/buffer/add/", add_form(job.pk, triggers=[{**learn, "enabled": "on"}])
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    buffer = Buffer.objects.get(job=job, name="rollout")
    assert buffer.schema == SCHEMA
    assert list(Trigger.objects.filter(buffer=buffer).values_list("params", flat=True)) == [
        learn["params"]
    ]
    page = admin_client.get(f"/admin/buffers/buffer/{buffer.pk}/change/")
    assert f"{job.pk}.rollout" in page.content.decode()


def test_admin_refuses_what_the_api_refuses(admin_client):
    job = JobFactory.create()
    url = "/admin/buffers/buffer/add/"
    bad_dtype = {"obs": {"shape": [4], "dtype": "float31"}}
    page = errors_of(admin_client.post(url, add_form(job.pk, schema=json.dumps(bad_dtype))))
    assert "obs.dtype: unknown dtype" in page
    page = errors_of(admin_client.post(url, add_form(job.pk, eviction="fifo")))
    assert "never drops data the learner has not sampled" in page
    wrong_key = {"name": "t", "kind": "data_key", "params": {"n": 1, "size": 2, "keys": ["act"]}}
    page = errors_of(admin_client.post(url, add_form(job.pk, triggers=[wrong_key])))
    assert "keys: &#x27;act&#x27; is not a key of this buffer" in page
    no_period = {"name": "t", "kind": "time", "params": {}}
    page = errors_of(admin_client.post(url, add_form(job.pk, triggers=[no_period])))
    assert "period_s: this field is required" in page
    assert not Buffer.objects.exists()
