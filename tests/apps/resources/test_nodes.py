from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from apps.resources.models import Node
from tests.apps.helpers import error_fields
from tests.factories import PoolFactory

pytestmark = pytest.mark.django_db

CAPACITY = {
    "cores": 8,
    "numa": [[0, 1, 2, 3], [4, 5, 6, 7]],
    "memory_mb": 32768,
    "gpus": [{"index": 1, "memory_mb": 24576}, {"index": 0, "memory_mb": 24576, "model": "L4"}],
}


def register(client, **overrides):
    payload = {"name": "worker-1", "pool": "cpu-a", "capacity": CAPACITY, **overrides}
    return client.post("/api/v1/nodes/register/", payload, format="json")


def node_client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def test_register_then_heartbeat_with_the_node_token(staff_actor):
    PoolFactory.create(name="cpu-a")
    response = register(staff_actor.client)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["cores"], body["gpus"], body["gpu_memory_mb"]) == (8, 2, 49152)
    assert body["capacity"]["gpus"][0]["index"] == 0
    token = body["node_token"]
    assert token.startswith("loomnode_")

    beat = node_client(token).post(
        f"/api/v1/nodes/{body['id']}/heartbeat/", {"usage": {"cpu_busy": 3}}, format="json"
    )
    assert beat.status_code == 200, beat.json()
    assert Node.objects.get(pk=body["id"]).usage == {"cpu_busy": 3}

    # Re-registering rotates the token: the old one stops working.
    new_token = register(staff_actor.client).json()["node_token"]
    stale = node_client(token).post(f"/api/v1/nodes/{body['id']}/heartbeat/", {}, format="json")
    assert stale.status_code == 401
    fresh = node_client(new_token).post(f"/api/v1/nodes/{body['id']}/heartbeat/", {}, format="json")
    assert fresh.status_code == 200
    assert Node.objects.count() == 1


def test_node_token_is_only_good_for_its_own_node(staff_actor):
    PoolFactory.create(name="cpu-a")
    first = register(staff_actor.client, name="a").json()
    second = register(staff_actor.client, name="b").json()
    response = node_client(first["node_token"]).post(
        f"/api/v1/nodes/{second['id']}/heartbeat/", {}, format="json"
    )
    assert response.status_code == 403


def test_staff_may_heartbeat_and_job_keys_may_not(staff_actor, job_actor):
    PoolFactory.create(name="cpu-a")
    node = register(staff_actor.client).json()
    url = f"/api/v1/nodes/{node['id']}/heartbeat/"
    assert staff_actor.client.post(url, {"status": "draining"}, format="json").status_code == 200
    assert job_actor.client.post(url, {}, format="json").status_code == 403
    assert register(job_actor.client).status_code == 403


@pytest.mark.parametrize(
    ("capacity", "field"),
    [
        ({**CAPACITY, "numa": [[0, 1, 2, 3], [3, 4, 5, 6, 7]]}, "capacity.numa"),
        ({**CAPACITY, "numa": [[0, 1, 2]]}, "capacity.numa"),
        ({**CAPACITY, "cores": -1}, "capacity.cores"),
        ({**CAPACITY, "gpus": [{"index": 0, "memory_mb": 1}] * 2}, "capacity.gpus"),
        ({"cores": 2}, "capacity.memory_mb"),
    ],
)
def test_bad_capacity(staff_actor, capacity, field):
    PoolFactory.create(name="cpu-a")
    response = register(staff_actor.client, capacity=capacity)
    assert response.status_code == 400
    assert field in error_fields(response), error_fields(response)


def test_unknown_pool(staff_actor):
    response = register(staff_actor.client, pool="nowhere")
    assert "pool" in error_fields(response)


def test_nodes_list_is_staff_only(staff_actor, job_actor):
    PoolFactory.create(name="cpu-a")
    register(staff_actor.client)
    assert len(staff_actor.client.get("/api/v1/nodes/").json()["results"]) == 1
    assert job_actor.client.get("/api/v1/nodes/").status_code == 403


def test_admin_capacity_edit_updates_totals_and_is_validated(admin_client):
    import json

    from tests.factories import NodeFactory

    node = NodeFactory.create()
    url = f"/admin/resources/node/{node.pk}/change/"
    form = {
        "name": node.name,
        "pool": node.pool_id,
        "status": "online",
        "address": "",
        "agent_version": "",
        "usage": "{}",
    }
    bad = admin_client.post(
        url, {**form, "capacity": json.dumps({"cores": 2, "numa": [[0]], "memory_mb": 1})}
    )
    assert bad.status_code == 200 and "NUMA" in bad.content.decode()
    good = admin_client.post(url, {**form, "capacity": json.dumps(CAPACITY)})
    assert good.status_code == 302
    node.refresh_from_db()
    assert (node.cores, node.gpus, node.gpu_memory_mb) == (8, 2, 49152)
