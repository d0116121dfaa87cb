"""``loom.Client`` and ``loom.AsyncClient`` buffer calls (declare, push, gather, sample,
priorities, stats) against this API in-process and a real buffer service (ZeroMQ)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from loom import AsyncClient, Buffer, Client
from loom.buffers import trigger
from loom.errors import ApiError, TransientError

from controlplane.asgi import application as asgi_application
from controlplane.wsgi import application
from tests.factories import JobFactory, make_key
from workers.algorithms.artos import DataKeyTrigger, ObjectKeyTrigger
from workers.buffers.schema import FieldSpec, Schema
from workers.buffers.workflow import Workflow

SCHEMA = {
    "obs": {"shape": [3], "dtype": "float32"},
    "reward": {"shape": [], "dtype": "float32"},
}


@pytest.fixture
def sdk(job_actor: Any) -> Iterator[Client]:
    # Calling the WSGI app directly would close the test's connection at request end.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    client = Client(
        "http://testserver", job_actor.raw_key, transport=httpx.WSGITransport(app=application)
    )
    yield client
    client.close()
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.mark.django_db
def test_declare_push_gather_sample_stats(sdk: Client, buffer_service: Any) -> None:
    learn = trigger("learn", "data_key", n=1, size=4, keys=["obs", "reward"])
    buffer = sdk.declare_buffer(name="rollout", schema=SCHEMA, capacity=16, triggers=[learn])
    assert isinstance(buffer, Buffer)
    assert (buffer.sync_mode, buffer.eviction, buffer.sampler) == (
        "on_policy",
        "keep_unsampled",
        "full_batch",
    )
    assert buffer.triggers[0]["params"] == {"n": 1, "size": 4, "keys": ["obs", "reward"]}
    buffer_service(buffer.id)

    obs = np.arange(12, dtype=np.float32).reshape(4, 3)
    pushed = sdk.push(buffer.id, "actor0", {"obs": obs, "reward": np.ones(4, np.float32)})
    assert pushed == {"steps": 4, "firings": 1}
    assert sdk.gather(buffer.id, {"actor0": (1, 3)}, keys=["obs"]) == {"obs": obs[1:3].tolist()}
    stats = sdk.buffer_stats(buffer.id)
    assert (stats["held"], stats["fill"], stats["firings"]) == (4, 0.25, {"learn": 1})
    sample = sdk.sample(buffer.id)
    assert len(sample.slots) == 4 and sample.weights is None
    assert np.array_equal(np.asarray(sample.records["obs"], np.float32), obs)

    with pytest.raises(ApiError) as refused:
        sdk.push(buffer.id, "actor0", {"obs": np.zeros((1, 4), np.float32)})
    assert refused.value.status_code == 400
    assert refused.value.errors[0]["field"] == "records.obs"

    assert sdk.get_buffer(buffer.id).name == "rollout"
    assert [b.id for b in sdk.list_buffers()] == [buffer.id]
    sdk.delete_buffer(buffer.id)
    assert sdk.list_buffers() == []
    with pytest.raises(ApiError) as gone:
        sdk.get_buffer(buffer.id)
    assert gone.value.status_code == 404


@pytest.mark.django_db
def test_declare_a_workflow_and_prioritised_sampling(sdk: Client, buffer_service: Any) -> None:
    schema = Schema({"obs": FieldSpec((2,), "float32"), "action": FieldSpec((), "int64")})
    flow = Workflow("dqn")
    flow.buffer("replay", schema, capacity=32, eviction="fifo", prioritised=True)
    flow.trigger("replay", "sync", ObjectKeyTrigger("model_param"), print)
    flow.trigger("replay", "learn", DataKeyTrigger(n=1, size=2, keys=["obs"]), print)
    (replay,) = sdk.declare_workflow(flow)
    assert (replay.sampler, replay.sync_mode) == ("prioritised", "off_policy")
    assert [t["name"] for t in replay.triggers] == ["sync", "learn"]
    buffer_service(replay.id)

    sdk.push(replay.id, "a", {"obs": np.zeros((6, 2), np.float32), "action": np.arange(6)})
    sample = sdk.sample(replay.id, batch_size=4, keys=["action"])
    assert sample.weights is not None and len(sample.weights) == 4
    assert set(sample.records) == {"action"}
    assert sdk.update_priorities(replay.id, sample.slots, np.full(4, 0.5)) == 4


@pytest.mark.django_db
def test_n_step_and_fifo_per_actor_samples(sdk: Client, buffer_service: Any) -> None:
    schema = {**SCHEMA, "done": {"shape": [], "dtype": "bool"}}
    n_step = sdk.declare_buffer(
        name="nstep", schema=schema, capacity=8, eviction="fifo", sampler="n_step"
    )
    fifo = sdk.declare_buffer(
        name="impala", schema=schema, capacity=8, eviction="fifo", sampler="fifo_per_actor"
    )
    buffer_service(n_step.id, fifo.id)
    records = {
        "obs": np.zeros((3, 3), np.float32),
        "reward": np.ones(3, np.float32),
        "done": np.array([False, False, True]),
    }
    for buffer in (n_step, fifo):
        sdk.push(buffer.id, "a", records)
    sample = sdk.sample(
        n_step.id, batch_size=4, n=2, gamma=0.5, reward_key="reward", done_key="done"
    )
    assert sample.n_step is not None and len(sample.n_step["returns"]) == 4
    assert set(sample.n_step["returns"]) <= {1.0, 1.5}
    with pytest.raises(ApiError) as refused:
        sdk.sample(n_step.id, batch_size=4, n=2, gamma=0.5, reward_key="reward")
    assert refused.value.status_code == 400 and "done_key" in str(refused.value)
    first = sdk.sample(fifo.id, batch_size=2, actor="a", keys=["reward"])
    second = sdk.sample(fifo.id)
    assert (first.actor, first.steps, second.steps) == ("a", [0, 1], [2])


@pytest.mark.django_db
def test_a_push_to_an_unreachable_service_is_sent_once(
    sdk: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from apps.buffers import dataplane

    buffer = sdk.declare_buffer(name="rollout", schema=SCHEMA, capacity=4)
    monkeypatch.delenv(dataplane.SERVICE_ENV, raising=False)
    requests: list[httpx.Request] = []
    sdk._http.event_hooks["request"].append(requests.append)
    with pytest.raises(TransientError):
        sdk.push(buffer.id, "a", {"reward": [1.0]})
    assert len(requests) == 1


@pytest.mark.django_db(transaction=True)
async def test_the_async_client_has_the_same_calls(buffer_service: Any) -> None:
    def set_up() -> str:
        return make_key(job=JobFactory.create())[1]

    raw_key = await asyncio.to_thread(set_up)
    transport = httpx.ASGITransport(app=asgi_application)
    async with AsyncClient("http://testserver", raw_key, transport=transport) as client:
        buffer = await client.declare_buffer(
            name="replay", schema=SCHEMA, capacity=8, eviction="fifo"
        )
        assert (buffer.sync_mode, buffer.sampler) == ("off_policy", "uniform")
        await asyncio.to_thread(buffer_service, buffer.id)
        records = {"obs": np.ones((3, 3), np.float32), "reward": [0.0, 1.0, 2.0]}
        assert await client.push(buffer.id, "a", records) == {"steps": 3, "firings": 0}
        sample = await client.sample(buffer.id, batch_size=5)
        assert len(sample.slots) == 5 and set(sample.records) == {"obs", "reward"}
        assert await client.gather(buffer.id, {"a": (2, 3)}, keys=["reward"]) == {"reward": [2.0]}
        assert (await client.buffer_stats(buffer.id))["held"] == 3
        assert (await client.get_buffer(buffer.id)).capacity == 8
        assert [b.name for b in await client.list_buffers()] == ["replay"]
        await client.delete_buffer(buffer.id)
