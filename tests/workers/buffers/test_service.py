"""The central buffer over ZeroMQ: put, sample, objects, errors naming the field."""

from __future__ import annotations

import queue
import time
from typing import Any

import numpy as np
import pytest
import zmq

from workers.algorithms.artos import DataKeyTrigger, ObjectKeyTrigger
from workers.buffers.passers import QueuePasser, RemotePasser, RemoteReceiver
from workers.buffers.schema import FieldSpec, Schema
from workers.buffers.service import BufferClient, BufferServer, BufferServiceError
from workers.buffers.store import ExperienceBuffer

SCHEMA = Schema({"obs": FieldSpec((3,), "float32"), "done": FieldSpec((), "bool")})


def batch(count: int, start: float = 0.0) -> dict[str, np.ndarray]:
    obs = np.arange(start, start + 3 * count, dtype=np.float32).reshape(count, 3)
    return {"obs": obs, "done": np.zeros(count, bool)}


@pytest.fixture
def served():
    buffer = ExperienceBuffer("replay", SCHEMA, capacity=32, prioritised=True)
    with BufferServer([buffer]) as server:
        client = BufferClient(server.address, timeout_s=10)
        yield buffer, client
        client.close()


def test_put_gather_and_sample_round_trip(served):
    buffer, client = served
    firings: queue.Queue[dict] = queue.Queue()
    buffer.bind("learn", DataKeyTrigger(1, 4, SCHEMA.keys), QueuePasser(firings))
    assert client.put("replay", "a", batch(4)) == 1
    firing = firings.get(timeout=5)
    data = client.gather("replay", firing["actors"])
    assert np.array_equal(data["obs"], batch(4)["obs"])
    sampled = client.sample("replay", "uniform", batch_size=8, keys=["obs"])
    assert set(sampled) == {"slots", "obs"} and sampled["obs"].shape == (8, 3)
    per = client.sample("replay", "prioritised", batch_size=4)
    client.update_priorities("replay", per["slots"], np.ones(4))
    assert client.stats("replay")["steps_written"] == 4


def test_objects_travel_as_arrays_and_fire_remote_triggers(served):
    buffer, client = served
    receiver = RemoteReceiver()
    buffer.bind("invoke", ObjectKeyTrigger("model_param"), RemotePasser(receiver.address))
    client.put_object("replay", "model_param", {"w": np.eye(2, dtype=np.float32)})
    firing = receiver.receive(timeout_s=5)
    assert firing is not None and firing["version"] == 1 and firing["trigger_id"] == "invoke"
    version, value = client.get_object("replay", "model_param")
    assert version == 1 and np.array_equal(value["w"], np.eye(2))
    receiver.close()


def test_bad_requests_come_back_as_errors_naming_the_field(served):
    _, client = served
    with pytest.raises(BufferServiceError, match=r"^obs: dtype float64"):
        client.put("replay", "a", {"obs": np.zeros((2, 3)), "done": np.zeros(2, bool)})
    with pytest.raises(BufferServiceError, match="buffer: no buffer named 'other'"):
        client.stats("other")
    with pytest.raises(BufferServiceError, match=r"^sampler"):
        client.sample("replay", "lifo", 2)


def test_a_client_that_gets_no_answer_times_out_naming_the_operation():
    silent: zmq.Socket[Any] = zmq.Context.instance().socket(zmq.ROUTER)
    port = silent.bind_to_random_port("tcp://127.0.0.1")
    client = BufferClient(f"tcp://127.0.0.1:{port}", timeout_s=0.05)
    with pytest.raises(TimeoutError, match="did not answer stats"):
        client.stats("replay")
    client.close()
    silent.close()


def test_the_service_ticks_time_triggers_without_any_write() -> None:
    """A TimeTrigger fires on its period while nothing is written (artos Table 3)."""
    from workers.algorithms.artos import TimeTrigger
    from workers.buffers.passers import DirectPasser

    schema = Schema({"obs": FieldSpec((2,), "float32")})
    buffer = ExperienceBuffer("ticking", schema, 4)
    firings: list[object] = []
    buffer.bind("every", TimeTrigger(period=0.05), DirectPasser(firings.append))
    server = BufferServer([buffer]).start()
    try:
        deadline = time.monotonic() + 10
        while len(firings) < 2:
            assert time.monotonic() < deadline, "no time trigger fired"
            time.sleep(0.02)
    finally:
        server.stop()
