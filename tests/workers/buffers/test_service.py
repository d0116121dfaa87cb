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


STEP_SCHEMA = Schema(
    {
        "obs": FieldSpec((1,), "float32"),
        "reward": FieldSpec((), "float32"),
        "done": FieldSpec((), "bool"),
        "next_obs": FieldSpec((1,), "float32"),
    }
)


def steps(first: int, count: int, done_at: int | None = None) -> dict[str, np.ndarray]:
    """Steps ``first..first+count``: obs = step, reward = step + 1, a done at ``done_at``."""
    index = np.arange(first, first + count, dtype=np.float32)
    return {
        "obs": index[:, None],
        "reward": index + 1,
        "done": index == (-1 if done_at is None else done_at),
        "next_obs": index[:, None] + 1,
    }


@pytest.fixture
def steps_served():
    buffer = ExperienceBuffer("steps", STEP_SCHEMA, capacity=64)
    with BufferServer([buffer]) as server:
        client = BufferClient(server.address, timeout_s=10)
        yield buffer, client
        client.close()


def test_n_step_returns_over_zeromq_cut_at_a_done_and_at_the_data_held(steps_served):
    _, client = steps_served
    client.put("steps", "a", steps(0, 6, done_at=2))
    gamma = 0.5
    out = client.sample_n_step(
        "steps",
        64,
        n=3,
        gamma=gamma,
        reward_key="reward",
        done_key="done",
        keys=["obs"],
        last_keys=["next_obs"],
    )
    for row, t in enumerate(out["obs"][:, 0].astype(int)):
        rewards = np.arange(t, 6) + 1.0
        m = min(3, 6 - t, 3 - t if t <= 2 else 3)  # a done at step 2 ends the sum there
        expected = sum(gamma**k * rewards[k] for k in range(m))
        assert out["n_step.returns"][row] == pytest.approx(expected)
        assert out["n_step.steps"][row] == m
        ended = t <= 2 and t + m - 1 == 2
        assert out["n_step.discounts"][row] == pytest.approx(0.0 if ended else gamma**m)
        assert out["n_step.last.next_obs"][row, 0] == t + m  # the state to bootstrap from


def test_n_step_parameters_are_refused_naming_the_field(steps_served):
    _, client = steps_served
    client.put("steps", "a", steps(0, 2))
    good: dict[str, object] = {"n": 2, "gamma": 0.9, "reward_key": "reward", "done_key": "done"}
    cases: list[tuple[dict[str, object], str]] = [
        ({"n": 0}, r"^n: expected a positive integer"),
        ({"n": True}, r"^n:"),
        ({"gamma": 1.5}, r"^gamma: expected a number in 0..1"),
        ({"reward_key": "nope"}, r"^reward_key: 'nope' is not a key"),
        ({"reward_key": "obs"}, r"^reward_key:"),  # float32 (1,) is one number: accepted
        ({"done_key": "next_obs"}, r"^done_key: 'next_obs' is float32, not a number"),
    ]
    for change, pattern in cases:
        params = {**good, **change}
        if change == {"reward_key": "obs"}:
            assert client.sample_n_step("steps", 2, **params)["n_step.returns"].shape == (2,)
            continue
        with pytest.raises(BufferServiceError, match=pattern) as raised:
            client.sample_n_step("steps", 2, **params)
        assert raised.value.kind == "SamplerError"
    with pytest.raises(BufferServiceError, match=r"^last_keys\[0\]"):
        client.sample_n_step("steps", 2, **good, last_keys=["nope"])
    with pytest.raises(BufferServiceError, match=r"^batch_size"):
        client.sample_n_step("steps", 0, **good)


def test_fifo_per_actor_gives_each_actors_steps_in_order_once(steps_served):
    _, client = steps_served
    client.put("steps", "a", steps(0, 3))
    client.put("steps", "b", steps(100, 2))
    client.put("steps", "a", steps(3, 2))
    taken: dict[str, list[int]] = {"a": [], "b": []}
    order = []
    while True:
        try:
            actor, data = client.sample_fifo("steps", batch_size=2, keys=["obs"])
        except BufferServiceError as error:
            assert error.kind == "SamplerError" and str(error).startswith("size:")
            break
        order.append(actor)
        assert np.array_equal(
            data["fifo.steps"],
            np.arange(len(taken[actor]), len(taken[actor]) + len(data["fifo.steps"])),
        )
        taken[actor] += data["obs"][:, 0].astype(int).tolist()
    assert taken == {"a": [0, 1, 2, 3, 4], "b": [100, 101]}
    assert order == ["a", "a", "b", "a"]  # a's first block cut to 2, its rest first in line
    assert client.stats("steps")["fifo_waiting"] == 0


def test_fifo_per_actor_for_one_actor_skips_what_a_killed_actor_dropped(steps_served):
    _, client = steps_served
    client.put("steps", "a", steps(0, 4))
    client.put("steps", "b", steps(0, 2))
    client.drop_actor("steps", "a", since_step=2)
    client.put("steps", "a", steps(2, 1))  # the restarted run
    actor, data = client.sample_fifo("steps", actor="a")
    assert actor == "a" and data["fifo.steps"].tolist() == [0, 1]
    actor, data = client.sample_fifo("steps", actor="a")
    assert data["fifo.steps"].tolist() == [2]
    with pytest.raises(BufferServiceError, match=r"^size: no block of actor 'a'"):
        client.sample_fifo("steps", actor="a")
    with pytest.raises(BufferServiceError, match=r"^actor:"):
        client._call({"op": "sample", "buffer": "steps", "sampler": "fifo_per_actor", "actor": 3})
    assert client.sample_fifo("steps")[0] == "b"


def test_fifo_per_actor_skips_steps_the_eviction_overwrote():
    buffer = ExperienceBuffer("small", STEP_SCHEMA, capacity=4, eviction="fifo")
    with BufferServer([buffer]) as server:
        client = BufferClient(server.address, timeout_s=10)
        client.put("small", "a", steps(0, 3))
        client.put("small", "a", steps(3, 3))  # overwrites steps 0 and 1
        taken = []
        for _ in range(2):
            taken += client.sample_fifo("small")[1]["fifo.steps"].tolist()
        assert taken == [2, 3, 4, 5]
        client.close()


REPORT = {
    "actor": "actor0",
    "state": "prewarmed",
    "invocations": 3,
    "restored": 2,
    "cold": 1,
    "last_startup_wait_s": 0.0,
    "last_restore_s": 0.004,
    "startup_wait_p50_s": 0.002,
    "startup_wait_p99_s": 0.03,
}


def test_actor_reports_keep_the_latest_per_workflow_and_actor_in_stats(served):
    _, client = served
    client.report_actors("replay", "ppo", [REPORT, {**REPORT, "actor": "actor1"}])
    client.report_actors("replay", "ppo", [{**REPORT, "state": "running", "invocations": 4}])
    client.report_actors("replay", "sac", [REPORT])
    states = client.stats("replay")["actor_states"]
    assert [(s["workflow"], s["actor"], s["state"]) for s in states] == [
        ("ppo", "actor0", "running"),
        ("ppo", "actor1", "prewarmed"),
        ("sac", "actor0", "prewarmed"),
    ]
    assert states[0]["invocations"] == 4 and states[0]["reported_at"] > 0


@pytest.mark.parametrize(
    ("workflow", "actors", "pattern"),
    [
        ("", [REPORT], r"^workflow:"),
        ("ppo", {"actor": "a"}, r"^actors: expected a list"),
        ("ppo", [{**REPORT, "state": "asleep"}], r"^actors\[0\]\.state:"),
        ("ppo", [REPORT, {**REPORT, "actor": ""}], r"^actors\[1\]\.actor:"),
        ("ppo", [{**REPORT, "cold": -1}], r"^actors\[0\]\.cold: expected a count"),
        ("ppo", [{**REPORT, "startup_wait_p99_s": "slow"}], r"^actors\[0\]\.startup_wait_p99_s"),
    ],
)
def test_a_bad_actor_report_is_refused_whole_naming_the_field(served, workflow, actors, pattern):
    _, client = served
    with pytest.raises(BufferServiceError, match=pattern):
        client.report_actors("replay", workflow, actors)
    assert client.stats("replay")["actor_states"] == []
