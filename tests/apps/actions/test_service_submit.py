"""Submitting an action that names a GPU service (arl-tangram §5.3): a registered service, GPU
units among its chunk sizes, a GPU pool, and a request no larger than the service allows —
each mistake a 400 naming its field at submission, never a 500, never an action accepted only
to fail on the GPU."""

from __future__ import annotations

from typing import Any

import pytest

from apps.actions.models import Action
from apps.actions.scheduler_store import DjangoActionStore
from tests.apps.helpers import error_fields
from tests.factories import PoolFactory, ServiceFactory

pytestmark = pytest.mark.django_db

REQUEST = {"input_ids": [[1, 2, 3], [4, 5]]}


@pytest.fixture
def gpu_pool() -> Any:
    pool = PoolFactory.create(name="gpus", kind="gpu")
    ServiceFactory.create(
        name="rm",
        pool=pool,
        allowed_dop=[1, 2],
        throughput={"1": 4.0, "2": 6.0},
        max_sequences=4,
        max_tokens=8,
        vocab_size=100,
    )
    return pool


def submit(actor: Any, payload: dict[str, Any], url: str = "/api/v1/actions/") -> Any:
    return actor.client.post(url, payload, format="json")


def test_a_service_action_is_stored_with_its_request_and_loaded_by_the_scheduler(
    job_actor, gpu_pool
):
    response = submit(
        job_actor,
        {"service": "rm", "demand": {"gpu": {"units": [1, 2]}}, "request": REQUEST, "priority": 5},
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["service"], body["pool"], body["request"], body["priority"]) == (
        "rm",
        "gpus",
        REQUEST,
        5,
    )
    (record,) = DjangoActionStore().load_active("gpus")
    assert (record.kind, record.service, record.request, record.priority) == (
        "gpu",
        "rm",
        REQUEST,
        5,
    )


def test_a_service_action_without_a_demand_takes_the_services_chunk_sizes(job_actor, gpu_pool):
    response = submit(job_actor, {"service": "rm", "request": REQUEST})
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["demand"] == {"gpu": {"units": [1, 2]}}
    assert body["key_resource"] == "gpu"
    # E(2) = 6 / (2 · 4): the efficiency its throughput implies (arl-tangram §4.1).
    assert body["elasticity"] == {"resource": "gpu", "efficiency": [1.0, 0.75]}
    assert body["priority"] == 0


BAD: list[tuple[dict[str, Any], str, str]] = [
    ({"service": "nope"}, "service", "unknown service"),
    ({"demand": {"gpu": 4}}, "demand.gpu", "not a chunk size"),
    ({"demand": {"gpu": {"min": 1, "max": 3}}}, "demand.gpu", "3 GPUs"),
    ({"demand": {"cpu": 2}}, "demand", "gpu units"),
    ({"demand": {"gpu": 1, "cpu": 2}}, "demand", "remove 'cpu'"),
    ({"pool": "cpus"}, "pool", "GPU pool"),
    ({"request": None}, "request", "needs a request"),
    ({"request": [[1, 2]]}, "request", "needs a request"),
    ({"request": {"text": "hi"}}, "request.input_ids", "non-empty list"),
    ({"request": {"input_ids": [[1], [2], [3], [4], [5]]}}, "request.input_ids", "at most 4"),
    ({"request": {"input_ids": [[1], list(range(9))]}}, "request.input_ids[1]", "at most 8"),
    ({"request": {"input_ids": [[1], [-1]]}}, "request.input_ids[1]", "non-negative"),
    ({"request": {"input_ids": [[1], []]}}, "request.input_ids[1]", "non-empty"),
    ({"request": {"input_ids": [[True]]}}, "request.input_ids[0]", "token ids"),
    ({"request": {"input_ids": [[1], [99, 100]]}}, "request.input_ids[1]", "vocabulary"),
    ({"priority": 2**31}, "priority", "less than or equal"),
    ({"priority": "high"}, "priority", "integer"),
]


@pytest.mark.parametrize(
    ("change", "field", "fragment"), BAD, ids=[f"{f}-{i}" for i, (_, f, _) in enumerate(BAD)]
)
def test_each_mistake_is_a_400_naming_its_field(job_actor, gpu_pool, change, field, fragment):
    PoolFactory.create(name="cpus", kind="cpu")
    payload = {"service": "rm", "demand": {"gpu": {"units": [1, 2]}}, "request": REQUEST}
    response = submit(job_actor, {**payload, **change})
    assert response.status_code == 400, response.json()
    errors = error_fields(response)
    assert field in errors, errors
    assert fragment in errors[field], errors
    assert not Action.objects.exists()


def test_a_request_without_a_service_is_refused(job_actor, gpu_pool):
    response = submit(job_actor, {"demand": {"gpu": 1}, "request": REQUEST})
    assert response.status_code == 400
    assert "service" in error_fields(response)["request"]


def test_no_gpu_pool_for_the_service_is_a_400(job_actor):
    ServiceFactory.create(name="lonely", allowed_dop=[1])
    response = submit(job_actor, {"service": "lonely", "request": REQUEST})
    assert response.status_code == 400
    assert "no GPU pool" in error_fields(response)["pool"]


def test_a_batch_names_the_oversized_item_and_stores_none(job_actor, gpu_pool):
    good = {"service": "rm", "request": REQUEST}
    big = {"service": "rm", "request": {"input_ids": [list(range(20))]}}
    response = submit(job_actor, {"items": [good, big, good]}, url="/api/v1/actions/batch/")
    assert response.status_code == 400, response.json()
    errors = error_fields(response)
    assert "items[1].request.input_ids[0]" in errors, errors
    assert not Action.objects.exists()


def test_a_service_without_limits_takes_any_well_formed_request(job_actor, gpu_pool):
    ServiceFactory.create(name="teacher", pool=gpu_pool, allowed_dop=[1, 2, 4, 8])
    request = {"input_ids": [list(range(5000))] * 300}
    response = submit(job_actor, {"service": "teacher", "demand": {"gpu": 8}, "request": request})
    assert response.status_code == 201, response.json()


def test_the_list_filters_by_service(job_actor, gpu_pool):
    ServiceFactory.create(name="teacher", pool=gpu_pool, allowed_dop=[1])
    for service in ("rm", "teacher", "rm"):
        assert submit(job_actor, {"service": service, "request": REQUEST}).status_code == 201
    listed = job_actor.client.get("/api/v1/actions/?service=rm").json()["results"]
    assert [action["service"] for action in listed] == ["rm", "rm"]
