"""A buffer declared through the REST API is served by a running buffer service without a
restart (``workers.buffers.follower``): the definition reaches it through Redis, data flows,
a changed definition replaces the buffer, a deleted one stops being served."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from apps.buffers import dataplane
from apps.buffers.models import Buffer
from workers.buffers.definitions import BufferNames
from workers.buffers.follower import DefinitionFollower
from workers.buffers.service import BufferServer

pytestmark = [pytest.mark.redis, pytest.mark.django_db]

SCHEMA = {"obs": {"shape": [2], "dtype": "float32"}, "action": {"shape": [], "dtype": "int64"}}


@pytest.fixture
def followed(
    settings: Any, redis_url: str, router_names: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[BufferServer]:
    """A buffer service following the control plane's definitions (the test's Redis prefix)."""
    server = BufferServer().start()
    follower = DefinitionFollower(server, redis_url, BufferNames(router_names.prefix)).start()
    assert follower.loaded.wait(10)
    monkeypatch.setenv(dataplane.SERVICE_ENV, server.address)
    yield server
    follower.stop()
    server.stop()
    for client in dataplane._local.__dict__.pop("clients", {}).values():
        client.close()


def _eventually(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "the buffer service did not follow"
        time.sleep(0.02)


def _push(client: Any, buffer_id: int, count: int) -> Any:
    records = {"obs": [[1.0, 2.0]] * count, "action": list(range(count))}
    body = {"actor": "a0", "records": records}
    return client.post(f"/api/v1/buffers/{buffer_id}/records/", body, format="json")


def test_declared_buffers_are_served_replaced_and_dropped(
    job_actor: Any, followed: BufferServer, django_capture_on_commit_callbacks: Any
) -> None:
    trigger = {"name": "learn", "kind": "data_key", "params": {"n": 1, "size": 2, "keys": ["obs"]}}
    with django_capture_on_commit_callbacks(execute=True):
        created = job_actor.client.post(
            "/api/v1/buffers/",
            {"name": "rollout", "schema": SCHEMA, "capacity": 8, "triggers": [trigger]},
            format="json",
        )
    assert created.status_code == 201, created.json()
    buffer_id = created.json()["id"]
    name = Buffer.objects.get(pk=buffer_id).service_name
    _eventually(lambda: name in followed.buffers)

    pushed = _push(job_actor.client, buffer_id, 2)
    assert pushed.status_code == 201, pushed.json()
    assert pushed.json()["firings"] == 1  # the stored trigger, bound by the service
    stats = job_actor.client.get(f"/api/v1/buffers/{buffer_id}/stats/").json()
    assert stats["held"] == 2 and stats["firings"] == {"learn": 1}

    served = followed.buffers[name]
    with django_capture_on_commit_callbacks(execute=True):
        row = Buffer.objects.get(pk=buffer_id)
        row.capacity = 16
        row.save()  # a changed definition, as the admin would save it
    _eventually(lambda: followed.buffers.get(name) is not served)
    assert followed.buffers[name].capacity == 16

    with django_capture_on_commit_callbacks(execute=True):
        deleted = job_actor.client.delete(f"/api/v1/buffers/{buffer_id}/")
    assert deleted.status_code == 204
    _eventually(lambda: name not in followed.buffers)
