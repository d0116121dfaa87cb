"""The GPU service registry (arl-tangram §5.3): REST and admin apply one set of rules, and every
bad field is a 400 (or a form error) naming it."""

from __future__ import annotations

from typing import Any

import pytest

from apps.resources.models import Service
from apps.resources.service_rules import efficiency_curve, service_errors
from tests.apps.helpers import error_fields
from tests.factories import PoolFactory, ServiceFactory

pytestmark = pytest.mark.django_db

FULL = {
    "name": "rm-7b",
    "backend": "sglang",
    "task": "reward",
    "model": "/models/rm-7b",
    "allowed_dop": [4, 1, 2],
    "memory_mb": 15000,
    "state_size_mb": 14000,
    "throughput": {"2": 7.0, "1": 4.0, "4": 12.0},
    "elasticity_source": "measured",
    "max_sequences": 64,
    "max_tokens": 4096,
    "vocab_size": 32000,
    "predeploy": {"replicas": 1, "chunk_size": 2, "nodes": ["gpu-a"]},
}


def test_a_full_service_is_registered_and_read_back(staff_actor):
    PoolFactory.create(name="gpus", kind="gpu")
    response = staff_actor.client.post("/api/v1/services/", {**FULL, "pool": "gpus"}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["allowed_dop"] == [1, 2, 4]  # kept sorted
    assert body["throughput"] == {"1": 4.0, "2": 7.0, "4": 12.0}
    # E(m) = throughput(m) / (m · throughput(1)); 3 GPUs take 2's efficiency.
    assert body["efficiency"] == [1.0, 0.875, 0.875, 0.75]
    assert body["predeploy"] == FULL["predeploy"]
    assert (body["max_sequences"], body["max_tokens"], body["pool"]) == (64, 4096, "gpus")
    assert body["vocab_size"] == 32000
    stored = Service.objects.get(name="rm-7b")
    assert (stored.task, stored.elasticity_source) == ("reward", "measured")


def test_the_old_shape_still_registers_with_one_gpu_by_default(staff_actor):
    response = staff_actor.client.post(
        "/api/v1/services/", {"name": "rm", "backend": "torch", "model": "m"}, format="json"
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["allowed_dop"], body["throughput"], body["efficiency"]) == ([1], {}, None)
    assert (body["max_sequences"], body["max_tokens"], body["predeploy"]) == (None, None, {})


BAD: list[tuple[dict[str, Any], str]] = [
    ({"backend": "tensorflow"}, "backend"),
    ({"task": "embed"}, "task"),
    ({"allowed_dop": [3]}, "allowed_dop"),
    ({"allowed_dop": []}, "allowed_dop"),
    ({"allowed_dop": [1, 1]}, "allowed_dop"),
    ({"allowed_dop": "1,2"}, "allowed_dop"),
    ({"allowed_dop": [True]}, "allowed_dop"),
    ({"throughput": {"8": 3.0}}, "throughput"),  # 8 is not one of its chunk sizes
    ({"throughput": {"1": 0}}, "throughput"),
    ({"throughput": {"1": "fast"}}, "throughput"),
    ({"throughput": [4.0]}, "throughput"),
    ({"elasticity_source": "guessed"}, "elasticity_source"),
    ({"max_sequences": 0}, "max_sequences"),
    ({"max_tokens": -5}, "max_tokens"),
    ({"max_tokens": "many"}, "max_tokens"),
    ({"vocab_size": 0}, "vocab_size"),
    ({"memory_mb": -1}, "memory_mb"),
    ({"predeploy": {"replicas": -1}}, "predeploy"),
    ({"predeploy": {"chunk_size": 8}}, "predeploy"),
    ({"predeploy": {"nodes": "gpu-a"}}, "predeploy"),
    ({"predeploy": {"warm": True}}, "predeploy"),
    ({"predeploy": []}, "predeploy"),
    ({"pool": "nowhere"}, "pool"),
]


@pytest.mark.parametrize(("change", "field"), BAD, ids=[f"{f}-{i}" for i, (_, f) in enumerate(BAD)])
def test_each_bad_field_is_a_400_naming_it(staff_actor, change, field):
    payload = {"name": "s", "backend": "torch", "model": "m", "allowed_dop": [1, 2], **change}
    response = staff_actor.client.post("/api/v1/services/", payload, format="json")
    assert response.status_code == 400, response.json()
    assert field in error_fields(response), error_fields(response)
    assert not Service.objects.exists()


def test_a_partial_update_is_checked_against_the_stored_fields(staff_actor):
    service = ServiceFactory.create(allowed_dop=[1, 2], throughput={"1": 3.0, "2": 5.0})
    url = f"/api/v1/services/{service.pk}/"
    response = staff_actor.client.patch(url, {"throughput": {"4": 9.0}}, format="json")
    assert response.status_code == 400
    assert "throughput" in error_fields(response)
    # Shrinking the chunk sizes under a stored throughput names the throughput.
    response = staff_actor.client.patch(url, {"allowed_dop": [1]}, format="json")
    assert response.status_code == 400
    assert "throughput" in error_fields(response)
    response = staff_actor.client.patch(url, {"max_sequences": 8}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["efficiency"] == [1.0, round(5.0 / 6.0, 6)]


def test_the_admin_refuses_what_the_api_refuses(admin_client):
    form = {
        "name": "bad",
        "backend": "torch",
        "task": "reward",
        "model": "m",
        "allowed_dop": "[3]",
        "memory_mb": "0",
        "state_size_mb": "0",
        "throughput": "{}",
        "elasticity_source": "declared",
        "predeploy": "{}",
    }
    response = admin_client.post("/admin/resources/service/add/", form)
    assert response.status_code == 200  # the form comes back with the error
    assert "3 is not a chunk size" in response.content.decode()
    response = admin_client.post(
        "/admin/resources/service/add/",
        {**form, "allowed_dop": "[1, 2]", "predeploy": '{"chunk_size": 4}'},
    )
    assert response.status_code == 200
    assert "chunk_size must be one of" in response.content.decode()
    assert not Service.objects.exists()
    response = admin_client.post(
        "/admin/resources/service/add/",
        {**form, "allowed_dop": "[1, 2]", "throughput": '{"1": 2.0, "2": 3.5}'},
    )
    assert response.status_code == 302
    assert Service.objects.get(name="bad").throughput == {"1": 2.0, "2": 3.5}


def test_the_rules_are_one_function():
    assert service_errors(FULL) == {}
    assert set(service_errors({**FULL, "allowed_dop": [16]})) == {"allowed_dop"}
    assert efficiency_curve({"2": 4.0}, 2) is None  # no base at one GPU
    assert efficiency_curve({"1": 2.0, "2": 5.0}, 2) == [1.0, 1.0]  # capped at 1
