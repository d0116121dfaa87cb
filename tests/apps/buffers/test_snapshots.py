"""Snapshots of each buffer's stats (fill level, counters, trigger firings), recorded from the
real buffer service by the beat task, pruned, and read back through the history endpoint."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from apps.buffers import dataplane, tasks
from apps.buffers.models import BufferSnapshot
from apps.buffers.services import buffer_snapshots_prune, buffer_snapshots_record
from tests.apps.helpers import error_fields

pytestmark = pytest.mark.django_db

SCHEMA = {"obs": {"shape": [2], "dtype": "float32"}}


def declare(client: Any, name: str, **fields: Any) -> int:
    body = {"name": name, "schema": SCHEMA, "capacity": 10, **fields}
    response = client.post("/api/v1/buffers/", body, format="json")
    assert response.status_code == 201, response.json()
    return int(response.json()["id"])


def test_snapshots_record_the_served_buffers_and_read_back(job_actor, other_actor, buffer_service):
    learn = {"name": "learn", "kind": "data_key", "params": {"n": 1, "size": 2, "keys": ["obs"]}}
    served = declare(job_actor.client, "rollout", triggers=[learn])
    declare(job_actor.client, "not-served")
    buffer_service(served)
    push = {"actor": "a", "records": {"obs": [[1.0, 2.0]] * 4}}
    job_actor.client.post(f"/api/v1/buffers/{served}/records/", push, format="json")

    earlier = timezone.now() - dt.timedelta(hours=30)
    assert buffer_snapshots_record(now=earlier) == 1
    assert tasks.buffers_snapshot() == 1
    url = f"/api/v1/buffers/{served}/history/"
    snapshots = job_actor.client.get(url).json()["snapshots"]
    assert len(snapshots) == 2
    latest = snapshots[0]
    assert (latest["held"], latest["fill"], latest["steps_written"]) == (4, 0.4, 4)
    assert latest["firings"] == {"learn": 2}
    since = (earlier + dt.timedelta(minutes=1)).isoformat()
    assert len(job_actor.client.get(url, {"since": since}).json()["snapshots"]) == 1
    assert set(error_fields(job_actor.client.get(url, {"limit": 0}))) == {"limit"}
    assert other_actor.client.get(url).status_code == 404

    assert tasks.buffers_prune() == 1
    assert buffer_snapshots_prune(older_than=timezone.now() + dt.timedelta(seconds=1)) == 1
    assert not BufferSnapshot.objects.exists()


def test_a_round_without_the_service_writes_nothing(job_actor, monkeypatch):
    declare(job_actor.client, "rollout")
    monkeypatch.delenv(dataplane.SERVICE_ENV, raising=False)
    assert buffer_snapshots_record(now=timezone.now()) == 0


def actor_report(actor: str, state: str, invocations: int) -> dict[str, Any]:
    return {
        "actor": actor,
        "state": state,
        "invocations": invocations,
        "restored": max(0, invocations - 1),
        "cold": min(1, invocations),
        "last_startup_wait_s": 0.002,
        "last_restore_s": 0.004,
        "startup_wait_p50_s": 0.001,
        "startup_wait_p99_s": 0.05,
    }


def test_actor_reports_are_kept_latest_per_workflow_and_actor(job_actor, buffer_service):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from apps.buffers.models import Buffer, BufferActorState
    from workers.buffers.service import BufferClient

    served = declare(job_actor.client, "rollout")
    server = buffer_service(served)
    name = Buffer.objects.get(pk=served).service_name
    client = BufferClient(server.address, timeout_s=5)
    client.report_actors(name, "ppo", [actor_report("actor0", "running", 1)])

    def record() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert buffer_snapshots_record(now=timezone.now()) == 1
        return len(queries)

    before = record()
    row = BufferActorState.objects.get()
    assert (row.workflow, row.actor, row.state, row.invocations) == ("ppo", "actor0", "running", 1)
    assert row.startup_wait_p99_s == 0.05 and row.cold == 1 and row.restored == 0

    reports = [actor_report(f"actor{i}", "checkpointed", 2) for i in range(3)]
    client.report_actors(name, "ppo", reports)
    client.report_actors(name, "sac", [actor_report("actor0", "prewarmed", 5)])
    assert record() == before  # however many actors: one upsert
    rows = BufferActorState.objects.order_by("workflow", "actor")
    assert [(r.workflow, r.actor, r.state) for r in rows] == [
        ("ppo", "actor0", "checkpointed"),
        ("ppo", "actor1", "checkpointed"),
        ("ppo", "actor2", "checkpointed"),
        ("sac", "actor0", "prewarmed"),
    ]
    client.close()

    # an actor not reported since the retention went is pruned with the snapshots
    assert buffer_snapshots_prune(older_than=timezone.now() + dt.timedelta(seconds=1)) == 2 + 4
    assert not BufferActorState.objects.exists()
