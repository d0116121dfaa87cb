"""A declared on-policy workflow whose actors are elastic CartPole actors: the ObjectKeyTrigger on
``model_param`` invokes them, the DataKeyTrigger on their full batch fires the learner."""

from __future__ import annotations

import queue

import numpy as np
import pytest

from workers.actors.cartpole import CartPoleProgram, schema_fields
from workers.algorithms.artos import DataKeyTrigger, ObjectKeyTrigger
from workers.buffers.schema import Schema
from workers.buffers.service import BufferClient
from workers.buffers.workflow import ACTORS, Workflow, WorkflowError

pytestmark = pytest.mark.processes

SCHEMA = Schema(schema_fields())


def test_declared_workflow_runs_elastic_actors_by_triggers(tmp_path):
    learner_q: queue.Queue[dict] = queue.Queue()
    flow = (
        Workflow("ppo")
        .buffer("rollout", SCHEMA, capacity=2 * 16, eviction="keep_unsampled")
        .trigger("rollout", "learn", DataKeyTrigger(2, 16, SCHEMA.keys), learner_q)
        .trigger("rollout", "invoke", ObjectKeyTrigger("model_param"), ACTORS)
        .actors(
            "actor",
            count=2,
            program="workers.actors.cartpole:program",
            buffer="rollout",
            steps=16,
            params_key="model_param",
        )
        .learner("learner", trigger="learn")
    )
    program = CartPoleProgram()
    program.prepare()
    with flow.start(checkpoint_dir=str(tmp_path)) as running:
        client = BufferClient(running.address)
        for _ in range(2):
            client.put_object("rollout", "model_param", program.initial_params())
            firing = learner_q.get(timeout=60)
            assert set(firing["actors"]) == {"actor0", "actor1"}
            batch = client.sample("rollout", "full_batch")
            assert batch["obs"].shape == (32, 4) and np.all(np.isin(batch["action"], [0, 1]))
            running.pool.wait(flow.actor_names)
            assert running.pool.states() == {"actor0": "checkpointed", "actor1": "checkpointed"}
        history = running.pool.records["actor0"].history
        assert [i.restored for i in history] == [False, True]
        client.close()


def test_actors_target_needs_declared_actors():
    flow = Workflow("x").buffer("b", SCHEMA, capacity=4)
    flow.trigger("b", "invoke", ObjectKeyTrigger("model_param"), ACTORS)
    with pytest.raises(WorkflowError, match=r"^target: '@actors'"):
        flow.start()
