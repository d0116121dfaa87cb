"""The buffer service's copy of the definitions in Redis (``apps.buffers.registry``): declared,
edited (triggers included), deleted, cascaded with the job, rebuilt by the sync task."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.test import override_settings

from apps.buffers import rules, tasks
from apps.buffers.models import Buffer
from workers.buffers.definitions import BufferNames
from workers.buffers.passers import DirectPasser
from workers.buffers.schema import Schema
from workers.buffers.store import ExperienceBuffer

pytestmark = [pytest.mark.redis, pytest.mark.django_db]

SCHEMA = {"obs": {"shape": [2], "dtype": "float32"}}


@pytest.fixture
def registry(redis_url: str) -> Iterator[tuple[redis.Redis, BufferNames]]:
    prefix = f"test-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    names = BufferNames(prefix)
    with override_settings(REDIS_URL=redis_url, LOOM_STREAM_PREFIX=prefix):
        yield client, names
    client.delete(names.definitions)
    client.close()


def held(client: redis.Redis, names: BufferNames) -> dict[str, dict[str, Any]]:
    raw: dict[bytes, bytes] = client.hgetall(names.definitions)  # type: ignore[assignment]
    return {key.decode(): json.loads(value) for key, value in raw.items()}


def test_declared_edited_and_deleted_definitions_reach_the_registry(
    registry: Any, job_actor: Any, django_capture_on_commit_callbacks: Any
) -> None:
    client, names = registry
    channel = client.pubsub()
    channel.subscribe(names.changed)
    learn = {"name": "learn", "kind": "data_key", "params": {"n": 1, "size": 4, "keys": ["obs"]}}
    with django_capture_on_commit_callbacks(execute=True):
        body = {"name": "rollout", "schema": SCHEMA, "capacity": 8, "triggers": [learn]}
        created = job_actor.client.post("/api/v1/buffers/", body, format="json").json()
    service_name = f"{job_actor.job.pk}.rollout"
    definition = held(client, names)[service_name]
    assert definition["triggers"] == [{**learn, "target": ""}]
    assert (definition["capacity"], definition["eviction"]) == (8, "keep_unsampled")
    # what the service builds from it is a working buffer with its trigger
    built = ExperienceBuffer(
        definition["name"],
        Schema(definition["schema"]),
        definition["capacity"],
        definition["eviction"],
        definition["prioritised"],
    )
    for trigger in definition["triggers"]:
        primitive = rules.build_trigger(trigger["kind"], trigger["params"])
        built.bind(trigger["name"], primitive, DirectPasser(print))

    buffer = Buffer.objects.get(pk=created["id"])
    with django_capture_on_commit_callbacks(execute=True):
        buffer.triggers.update(enabled=False)  # update() sends no signal ...
        buffer.capacity = 16
        buffer.save()  # ... the buffer's save publishes the whole definition again
    assert held(client, names)[service_name]["capacity"] == 16
    assert held(client, names)[service_name]["triggers"] == []

    with django_capture_on_commit_callbacks(execute=True):
        job_actor.job.delete()  # the cascade withdraws it
    assert held(client, names) == {}
    messages = [channel.get_message(timeout=1) for _ in range(4)]
    published = [m["data"] for m in messages if m and m["type"] == "message"]
    assert published and set(published) == {service_name.encode()}
    channel.close()


def test_sync_rebuilds_the_registry(registry: Any, job_actor: Any) -> None:
    client, names = registry
    body = {"name": "replay", "schema": SCHEMA, "capacity": 8, "eviction": "fifo"}
    job_actor.client.post("/api/v1/buffers/", body, format="json")  # its publication never commits
    client.hset(names.definitions, "9999.stale", "{}")
    assert held(client, names) == {"9999.stale": {}}
    assert tasks.buffers_sync() == 1
    assert list(held(client, names)) == [f"{job_actor.job.pk}.replay"]
