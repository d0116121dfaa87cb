"""ExperienceBuffer: triggers on every change, eviction, samplers, killed actors."""

from __future__ import annotations

import queue

import numpy as np
import pytest

from workers.algorithms.artos import (
    BufferFullError,
    DataKeyTrigger,
    ObjectKeyTrigger,
    SamplerError,
    TimeTrigger,
)
from workers.buffers.passers import DirectPasser, QueuePasser
from workers.buffers.schema import FieldSpec, Schema, SchemaError
from workers.buffers.store import DataLostError, ExperienceBuffer

SCHEMA = Schema({"obs": FieldSpec((2,), "float32"), "reward": FieldSpec((), "float32")})


def steps(start: int, count: int) -> dict[str, np.ndarray]:
    values = np.arange(start, start + count, dtype=np.float32)
    return {"obs": np.stack([values, -values], axis=1), "reward": values}


def test_full_batch_learner_fires_and_gathers_each_actor_in_order():
    buffer = ExperienceBuffer("ppo", SCHEMA, capacity=16, eviction="keep_unsampled")
    fired: list[dict] = []
    buffer.bind("learn", DataKeyTrigger(2, 3, SCHEMA.keys), DirectPasser(fired.append))
    buffer.put("a", steps(0, 3), now=1.0)
    assert fired == []
    buffer.put("b", steps(10, 3), now=2.0)
    assert len(fired) == 1 and fired[0]["trigger_id"] == "learn"
    data = buffer.gather(fired[0]["actors"])
    assert data["reward"].tolist() == [0, 1, 2, 10, 11, 12]
    assert buffer.snapshot()["firings"] == {"learn": 1}


def test_keys_of_one_step_may_arrive_separately_and_sampling_waits_for_all():
    buffer = ExperienceBuffer("dual", SCHEMA, capacity=8)
    pre: list[dict] = []
    buffer.bind("pre", DataKeyTrigger(1, 2, ["reward"]), DirectPasser(pre.append))
    buffer.put("a", {"reward": steps(0, 2)["reward"]})
    assert len(pre) == 1
    assert len(buffer.sample_full_batch()[0]) == 0  # obs not there yet
    buffer.put("a", {"obs": steps(0, 2)["obs"]})
    _slots, data = buffer.sample_full_batch()
    assert data["obs"][:, 0].tolist() == [0, 1]


def test_on_policy_buffer_refuses_to_drop_unsampled_data():
    buffer = ExperienceBuffer("ppo", SCHEMA, capacity=4, eviction="keep_unsampled")
    buffer.put("a", steps(0, 4))
    with pytest.raises(BufferFullError, match=r"^ppo: full"):
        buffer.put("a", steps(4, 1))
    buffer.sample_full_batch()
    buffer.put("a", steps(4, 2))  # sampled slots are reusable
    assert buffer.snapshot()["steps_evicted"] == 2


def test_fifo_eviction_overwrites_and_gather_refuses_lost_steps():
    buffer = ExperienceBuffer("dqn", SCHEMA, capacity=4)
    buffer.put("a", steps(0, 6))
    assert buffer.gather({"a": (2, 6)})["reward"].tolist() == [2, 3, 4, 5]
    with pytest.raises(DataLostError, match=r"^a: steps 0..2"):
        buffer.gather({"a": (0, 2)})


def test_uniform_and_prioritised_sampling_read_complete_steps():
    buffer = ExperienceBuffer("sac", SCHEMA, capacity=8, prioritised=True, seed=3)
    buffer.put("a", steps(0, 8))
    slots, data = buffer.sample_uniform(32)
    assert np.all(data["reward"] == buffer.data["reward"][slots])
    batch, data = buffer.sample_prioritised(16)
    buffer.update_priorities(batch.indices, np.full(16, 0.01))
    buffer.update_priorities(np.array([5]), np.array([100.0]))
    batch, _ = buffer.sample_prioritised(64)
    assert np.mean(batch.indices == 5) > 0.5


def test_killed_actor_partial_data_is_discarded_and_the_iteration_completes():
    buffer = ExperienceBuffer("ppo", SCHEMA, capacity=16, eviction="keep_unsampled")
    fired: list[dict] = []
    buffer.bind("learn", DataKeyTrigger(2, 4, SCHEMA.keys), DirectPasser(fired.append))
    buffer.put("a", steps(0, 4))
    buffer.put("b", steps(0, 2))  # killed mid-sample: two complete steps,
    buffer.put("b", {"reward": steps(2, 1)["reward"]})  # a third half-written
    assert buffer.drop_actor("b", since_step=0) == 3
    buffer.put("b", steps(100, 4))  # restarted actor resamples
    assert len(fired) == 1
    assert buffer.gather(fired[0]["actors"])["reward"].tolist()[4:] == [100, 101, 102, 103]


def test_objects_and_time_triggers():
    buffer = ExperienceBuffer("sync", SCHEMA, capacity=4)
    invoked: list[dict] = []
    sync_queue: queue.Queue[dict] = queue.Queue()
    buffer.bind("invoke", ObjectKeyTrigger("model_param"), DirectPasser(invoked.append))
    buffer.bind("sync", TimeTrigger(5.0), QueuePasser(sync_queue))
    buffer.put_object("model_param", {"w": np.ones(3)}, now=0.0)
    assert invoked[0]["version"] == 1
    assert buffer.get_object("model_param")[0] == 1
    buffer.tick(4.0)
    assert sync_queue.empty()
    buffer.tick(5.0)
    assert sync_queue.get_nowait()["trigger_id"] == "sync"
    with pytest.raises(KeyError, match="nothing"):
        buffer.get_object("nothing")


def test_killed_actor_keeps_complete_steps_when_the_policy_says_keep():
    buffer = ExperienceBuffer("sac", SCHEMA, capacity=16)
    buffer.put("a", steps(0, 2))
    buffer.put("a", {"reward": steps(2, 2)["reward"]})
    assert buffer.drop_actor("a") == 2
    buffer.put("a", steps(2, 1))
    assert buffer.gather({"a": (0, 3)})["reward"].tolist() == [0, 1, 2]
    with pytest.raises(SchemaError, match=r"^since_step"):
        buffer.drop_actor("a", since_step=5)


DONE_SCHEMA = Schema({**SCHEMA.fields, "done": FieldSpec((), "bool")})


def test_n_step_sums_stop_at_a_step_whose_keys_have_not_all_arrived():
    buffer = ExperienceBuffer("nstep", DONE_SCHEMA, capacity=16)
    buffer.put("a", {**steps(0, 2), "done": np.zeros(2, bool)})
    buffer.put("a", {"obs": steps(2, 1)["obs"]})  # dual stage: reward and done still to come
    _, data = buffer.sample_n_step(8, n=3, gamma=1.0, reward_key="reward", done_key="done")
    rows = zip(data["obs"][:, 0], data["n_step.returns"], data["n_step.steps"], strict=True)
    for t, total, m in rows:
        assert (total, m) == ((0.0 + 1.0, 2) if t == 0 else (1.0, 1))
    buffer.put("a", {"reward": np.array([2.0], np.float32), "done": np.array([True])})
    _, data = buffer.sample_n_step(8, n=3, gamma=1.0, reward_key="reward", done_key="done")
    first = data["obs"][:, 0] == 0
    assert np.all(data["n_step.returns"][first] == 3.0)
    assert np.all(data["n_step.discounts"][first] == 0.0)  # the episode ended within n


def test_fifo_per_actor_waits_for_complete_steps_and_marks_them_sampled():
    buffer = ExperienceBuffer("impala", SCHEMA, capacity=4, eviction="keep_unsampled")
    buffer.put("a", {"obs": steps(0, 4)["obs"]})
    with pytest.raises(SamplerError, match=r"^size: no block is waiting"):
        buffer.sample_fifo()
    buffer.put("a", {"reward": steps(0, 4)["reward"]})
    actor, order, _, data = buffer.sample_fifo(max_steps=4)
    assert (actor, order.tolist(), data["reward"].tolist()) == ("a", [0, 1, 2, 3], [0, 1, 2, 3])
    buffer.put("a", steps(4, 4))  # the sampled slots are free again (keep_unsampled)
    assert buffer.snapshot()["fifo_waiting"] == 4


def test_samples_between_writes_see_every_write_and_release():
    """The complete slots are kept between writes; each write, overwrite and killed actor's
    release shows in the very next sample."""
    buffer = ExperienceBuffer("replay", SCHEMA, capacity=8, eviction="fifo", seed=3)
    buffer.put("a", steps(0, 2))
    for _ in range(3):
        assert set(buffer.sample_uniform(16)[1]["reward"].tolist()) <= {0, 1}
    buffer.put("b", {"obs": steps(10, 3)["obs"]})  # not complete yet: no reward
    assert set(buffer.sample_uniform(32)[1]["reward"].tolist()) <= {0, 1}
    buffer.put("b", {"reward": steps(10, 3)["reward"]})
    assert {10, 11, 12} <= set(buffer.sample_uniform(64)[1]["reward"].tolist())
    buffer.drop_actor("b", since_step=0)
    assert set(buffer.sample_uniform(32)[1]["reward"].tolist()) <= {0, 1}
    buffer.put("c", steps(20, 8))  # FIFO: overwrites a's two steps
    assert set(buffer.sample_uniform(64)[1]["reward"].tolist()) <= set(range(20, 28))
    assert buffer.sample_full_batch()[1]["reward"].tolist() == list(range(20, 28))
