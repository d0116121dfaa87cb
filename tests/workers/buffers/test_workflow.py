"""The workflow API: an on-policy loop (PPO's pattern, artos Fig. 1 top, Table 3) and an
off-policy one (SAC's: temporal training and sync by TimeTrigger), declared and run."""

from __future__ import annotations

import queue
import threading
import time

import numpy as np
import pytest

from workers.algorithms.artos import DataKeyTrigger, ObjectKeyTrigger, TimeTrigger
from workers.buffers.schema import FieldSpec, Schema
from workers.buffers.service import BufferClient
from workers.buffers.workflow import Workflow, WorkflowError

SCHEMA = Schema({"obs": FieldSpec((2,), "float32"), "reward": FieldSpec((), "float32")})
ACTORS, STEPS, ITERATIONS = 3, 5, 4


def test_on_policy_loop_learner_and_actor_invocation_by_triggers():
    learner_q: queue.Queue[dict] = queue.Queue()
    actor_q: queue.Queue[dict] = queue.Queue()
    flow = (
        Workflow("ppo")
        .buffer("rollout", SCHEMA, capacity=ACTORS * STEPS, eviction="keep_unsampled")
        .trigger("rollout", "learn", DataKeyTrigger(ACTORS, STEPS, SCHEMA.keys), learner_q)
        .trigger("rollout", "invoke", ObjectKeyTrigger("model_param"), actor_q)
        .actors("actor", count=ACTORS)
        .learner("learner", trigger="learn")
    )
    assert flow.to_json()["triggers"][0] == {
        "buffer": "rollout",
        "name": "learn",
        "kind": "data_key",
        "params": {"n": ACTORS, "size": STEPS, "keys": ["obs", "reward"]},
    }
    learned: list[float] = []
    with flow.start() as running:

        def actors() -> None:
            client = BufferClient(running.address)
            for _ in range(ITERATIONS):
                firing = actor_q.get(timeout=10)  # ObjectKeyTrigger: new parameters
                version, params = client.get_object("rollout", "model_param")
                assert version == firing["version"]
                for actor in range(ACTORS):
                    reward = np.full(STEPS, params["w"][0] + actor, np.float32)
                    obs = np.zeros((STEPS, 2), np.float32)
                    client.put("rollout", f"a{actor}", {"obs": obs, "reward": reward})
            client.close()

        thread = threading.Thread(target=actors)
        thread.start()
        learner = BufferClient(running.address)
        learner.put_object("rollout", "model_param", {"w": np.zeros(1, np.float32)})
        for iteration in range(ITERATIONS):
            firing = learner_q.get(timeout=10)
            batch = learner.sample("rollout", "full_batch")
            assert batch["reward"].shape == (ACTORS * STEPS,)
            learned.append(float(batch["reward"].mean()))
            learner.put_object("rollout", "model_param", {"w": np.full(1, iteration + 1.0)})
            assert firing["actors"].keys() == {f"a{i}" for i in range(ACTORS)}
        thread.join(timeout=10)
        learner.close()
    assert learned == [1.0, 2.0, 3.0, 4.0]  # each iteration saw the previous parameters


def test_off_policy_learner_samples_on_a_period_without_waiting_for_actors():
    learner_q: queue.Queue[dict] = queue.Queue()
    flow = (
        Workflow("sac")
        .buffer("replay", SCHEMA, capacity=64, prioritised=True)
        .trigger("replay", "train", TimeTrigger(1.0), learner_q)
    )
    now = [0.0]
    with flow.start(clock=lambda: now[0]) as running:
        client = BufferClient(running.address)
        client.put(
            "replay", "a0", {"obs": np.zeros((8, 2), np.float32), "reward": np.ones(8, np.float32)}
        )
        running.tick(0.0)
        running.tick(0.5)
        running.tick(1.0)
        assert learner_q.get(timeout=5)["trigger_id"] == "train"
        assert client.sample("replay", "prioritised", 4)["weights"].shape == (4,)
        client.close()


def test_declaration_errors_name_the_part():
    flow = Workflow("x").buffer("b", SCHEMA, capacity=4)
    with pytest.raises(WorkflowError, match=r"^trigger: 't' uses keys \['act'\]"):
        flow.trigger("b", "t", DataKeyTrigger(1, 1, ["act"]), print)
    with pytest.raises(WorkflowError, match=r"^trigger: 't' names an undeclared buffer"):
        flow.trigger("c", "t", DataKeyTrigger(1, 1, ["obs"]), print)
    with pytest.raises(WorkflowError, match=r"^target"):
        flow.trigger("b", "t", DataKeyTrigger(1, 1, ["obs"]), "http://nope")
    with pytest.raises(WorkflowError, match=r"^learner"):
        flow.learner("l", trigger="missing")


@pytest.mark.processes
def test_elastic_actors_report_their_states_to_the_buffer_service(tmp_path):
    from workers.actors.cartpole import CartPoleProgram, schema_fields
    from workers.buffers.workflow import ACTORS as INVOKE_ACTORS

    schema = Schema(schema_fields())
    flow = (
        Workflow("reporting")
        .buffer("rollout", schema, capacity=32, eviction="keep_unsampled")
        .trigger("rollout", "invoke", ObjectKeyTrigger("model_param"), INVOKE_ACTORS)
        .actors(
            "actor",
            count=2,
            program="workers.actors.cartpole:program",
            buffer="rollout",
            steps=8,
            params_key="model_param",
        )
    )
    program = CartPoleProgram()
    program.prepare()
    with flow.start(checkpoint_dir=str(tmp_path)) as running:
        assert running.reporter is not None
        running.reporter.every_s = 0.05
        client = BufferClient(running.address)
        for _ in range(2):
            client.put_object("rollout", "model_param", program.initial_params())
            time.sleep(0.2)  # the trigger's invocation is passed from the server's thread
            running.pool.wait(flow.actor_names)
            client.sample("rollout", "full_batch")
        deadline = time.monotonic() + 10
        while True:
            states = client.stats("rollout")["actor_states"]
            if [s["invocations"] for s in states] == [2, 2]:
                break
            assert time.monotonic() < deadline, states
            time.sleep(0.05)
        client.close()
    assert [(s["workflow"], s["actor"], s["state"]) for s in states] == [
        ("reporting", "actor0", "checkpointed"),
        ("reporting", "actor1", "checkpointed"),
    ]
    assert all(s["cold"] == 1 and s["restored"] == 1 for s in states)
    assert all(s["startup_wait_p99_s"] >= s["startup_wait_p50_s"] >= 0 for s in states)
    assert all(s["last_restore_s"] > 0 for s in states)
