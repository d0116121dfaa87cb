"""Buffer definitions through the REST API: declare, list, get, delete, a whole workflow at
once and back (``Workflow.to_json`` round trip), every refusal naming its field."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from apps.buffers.models import Buffer, Trigger
from tests.apps.helpers import error_fields
from workers.algorithms.artos import DataKeyTrigger, ObjectKeyTrigger, TimeTrigger
from workers.buffers.schema import FieldSpec, Schema, tokens
from workers.buffers.workflow import Workflow

pytestmark = pytest.mark.django_db

SCHEMA = {"obs": {"shape": [4], "dtype": "float32"}, "reward": {"shape": [], "dtype": "float32"}}


def declare(client: Any, **fields: Any) -> Any:
    body = {"name": "rollout", "schema": SCHEMA, "capacity": 64, **fields}
    return client.post("/api/v1/buffers/", body, format="json")


def test_declare_get_list_delete(job_actor, other_actor):
    trigger = {"name": "learn", "kind": "data_key", "params": {"n": 2, "size": 8, "keys": ["obs"]}}
    response = declare(job_actor.client, triggers=[trigger])
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["job"] == job_actor.job.pk
    assert (body["eviction"], body["sync_mode"], body["sampler"]) == (
        "keep_unsampled",
        "on_policy",
        "full_batch",
    )
    assert body["triggers"] == [{**trigger, "target": "", "enabled": True}]
    assert body["service_name"] == f"{job_actor.job.pk}.rollout"
    url = f"/api/v1/buffers/{body['id']}/"
    assert job_actor.client.get(url).json()["name"] == "rollout"

    # another job neither sees it nor can touch it; its own "rollout" is its own
    assert other_actor.client.get(url).status_code == 404
    assert other_actor.client.delete(url).status_code == 404
    assert declare(other_actor.client).status_code == 201
    listed = job_actor.client.get("/api/v1/buffers/").json()["results"]
    assert [b["id"] for b in listed] == [body["id"]]

    assert error_fields(declare(job_actor.client)) == {
        "name": "buffer 'rollout' is already declared in this job"
    }
    assert job_actor.client.delete(url).status_code == 204
    assert not Trigger.objects.filter(buffer_id=body["id"]).exists()
    assert job_actor.client.get(url).status_code == 404


def test_refusals_name_the_field(job_actor):
    unknown_dtype = {"obs": {"shape": [4], "dtype": "float31"}}
    assert set(error_fields(declare(job_actor.client, schema=unknown_dtype))) == {
        "schema.obs.dtype"
    }
    assert set(error_fields(declare(job_actor.client, capacity=-5))) == {"capacity"}
    assert set(error_fields(declare(job_actor.client, eviction="fifo", sync_mode="on_policy"))) == {
        "eviction"
    }
    wrong_key = {"name": "t", "kind": "data_key", "params": {"n": 1, "size": 2, "keys": ["act"]}}
    fields = error_fields(declare(job_actor.client, triggers=[wrong_key]))
    assert set(fields) == {"triggers[0].params.keys"}
    assert "'act' is not a key of this buffer" in fields["triggers[0].params.keys"]
    bad_n = {"name": "t", "kind": "data_key", "params": {"n": 0, "size": 2, "keys": ["obs"]}}
    assert set(error_fields(declare(job_actor.client, triggers=[bad_n]))) == {
        "triggers[0].params.n"
    }
    no_period = {"name": "t", "kind": "time", "params": {}}
    assert set(error_fields(declare(job_actor.client, triggers=[no_period]))) == {
        "triggers[0].params.period_s"
    }
    assert not Buffer.objects.exists()


def test_staff_declare_into_a_named_job(staff_actor, job_actor):
    assert set(error_fields(declare(staff_actor.client))) == {"job"}
    response = declare(staff_actor.client, job=job_actor.job.pk)
    assert response.status_code == 201 and response.json()["job"] == job_actor.job.pk


def ppo_and_dqn_workflow() -> Workflow:
    rollout = Schema(
        {
            "obs": FieldSpec((4,), "float32"),
            "action": FieldSpec((), "int64"),
            "prompt": tokens(32),
        }
    )
    replay = Schema({"obs": FieldSpec((84, 84), "uint8"), "done": FieldSpec((), "bool")})
    flow = Workflow("mixed")
    flow.buffer("rollout", rollout, capacity=512, eviction="keep_unsampled")
    flow.buffer("replay", replay, capacity=10_000, eviction="fifo", prioritised=True)
    flow.trigger("rollout", "learn", DataKeyTrigger(n=4, size=128, keys=rollout.keys), print)
    flow.trigger("rollout", "invoke", ObjectKeyTrigger("model_param"), "tcp://127.0.0.1:5999")
    flow.trigger("replay", "train", TimeTrigger(0.5), print)
    return flow


def test_a_workflow_round_trips_through_to_json(job_actor):
    declared = ppo_and_dqn_workflow().to_json()
    response = job_actor.client.post("/api/v1/buffers/workflow/", declared, format="json")
    assert response.status_code == 201, response.json()
    assert [b["name"] for b in response.json()] == ["rollout", "replay"]

    back = job_actor.client.get("/api/v1/buffers/workflow/").json()
    for original, stored in zip(declared["buffers"], back["buffers"], strict=True):
        assert {k: stored[k] for k in original} == original
    assert back["buffers"][0]["sync_mode"] == "on_policy"
    assert back["buffers"][1]["sampler"] == "prioritised"
    for original, stored in zip(declared["triggers"], back["triggers"], strict=True):
        assert {k: stored[k] for k in original} == original
    # the stored schema is the data plane's: it builds and checks records
    schema = Schema(back["buffers"][0]["schema"])
    assert schema.validate({"prompt": [[1, 2, 3]], "action": np.zeros(1, np.int64)})[0] == 1


def test_a_workflow_is_declared_whole_or_not_at_all(job_actor):
    declared = ppo_and_dqn_workflow().to_json()
    declared["buffers"][1]["schema"]["obs"]["dtype"] = "complex64"
    declared["triggers"].append({"buffer": "nowhere", "name": "x", "kind": "time", "params": {}})
    declared["triggers"][0]["params"]["keys"] = ["obs", "reward"]
    fields = error_fields(
        job_actor.client.post("/api/v1/buffers/workflow/", declared, format="json")
    )
    assert set(fields) == {
        "buffers[1].schema.obs.dtype",
        "triggers[0].params.keys",
        "triggers[3].buffer",
    }
    assert not Buffer.objects.exists()

    good = ppo_and_dqn_workflow().to_json()
    assert (
        job_actor.client.post("/api/v1/buffers/workflow/", good, format="json").status_code == 201
    )
    again = job_actor.client.post("/api/v1/buffers/workflow/", good, format="json")
    assert error_fields(again) == {
        "buffers[0].name": "buffer 'rollout' is already declared in this job"
    }
    assert Buffer.objects.count() == 2


def test_listing_costs_the_same_queries_for_one_buffer_or_many(job_actor):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    trigger = {"name": "tick", "kind": "time", "params": {"period_s": 1}}

    def count_queries() -> int:
        with CaptureQueriesContext(connection) as queries:
            response = job_actor.client.get("/api/v1/buffers/")
            assert response.status_code == 200
        return len(queries.captured_queries)

    declare(job_actor.client, name="first", triggers=[trigger])
    count_queries()  # the first request also stamps the key's last use
    one = count_queries()
    for index in range(5):
        declare(
            job_actor.client, name=f"more-{index}", triggers=[trigger, {**trigger, "name": "b"}]
        )
    assert count_queries() == one
    assert len(job_actor.client.get("/api/v1/buffers/").json()["results"]) == 6
