"""Node-local cache in shared memory: a forked actor writes, the cache service transfers stage
by stage to the central buffer, whose learner trigger fires (artos §4.2, §4.4)."""

from __future__ import annotations

import os
import queue
import uuid

import numpy as np
import pytest

from workers.algorithms.artos import BufferFullError, DataKeyTrigger, TransferTrigger
from workers.buffers.passers import QueuePasser
from workers.buffers.schema import FieldSpec, Schema, tokens
from workers.buffers.service import BufferServer
from workers.buffers.shm import CacheService, CacheWriter, SharedCache
from workers.buffers.store import ExperienceBuffer

pytestmark = pytest.mark.processes

SCHEMA = Schema(
    {
        "obs": FieldSpec((4,), "float32"),
        "reward": FieldSpec((), "float32"),
        "text": tokens(max_len=5),
    }
)


def actor_batch(actor: int, count: int) -> dict:
    values = np.arange(count, dtype=np.float32) + 100 * actor
    return {
        "obs": np.repeat(values[:, None], 4, axis=1),
        "reward": values,
        "text": [[actor, step] for step in range(count)],
    }


def test_forked_actors_write_and_transfer_triggers_deliver_stages_in_order():
    name = f"artos-test-{uuid.uuid4().hex[:8]}"
    cache = SharedCache.create(name, SCHEMA, ["a0", "a1"], steps_per_actor=8)
    try:
        check_transfer(name, cache)
    finally:
        cache.close()


def check_transfer(name: str, cache: SharedCache) -> None:
    central = ExperienceBuffer("rollout", SCHEMA, capacity=64, eviction="keep_unsampled")
    learner: queue.Queue[dict] = queue.Queue()
    central.bind("pre", DataKeyTrigger(2, 4, ["reward"]), QueuePasser(learner))
    central.bind("learn", DataKeyTrigger(2, 4, SCHEMA.keys), QueuePasser(learner))
    with BufferServer([central]) as server:
        trigger = TransferTrigger([("reward",), ("obs", "text")], size=4)
        service = CacheService(cache, trigger, server.address, "rollout").start()
        try:
            children = []
            for index in range(2):
                pid = os.fork()
                if pid == 0:  # the actor: attach by name, write, exit
                    code = 0
                    try:
                        writer = CacheWriter(name, f"a{index}")
                        batch = actor_batch(index, 4)
                        writer.write({"reward": batch["reward"]})
                        writer.write({"obs": batch["obs"], "text": batch["text"]})
                        writer.close()
                    except BaseException:
                        code = 1
                    os._exit(code)
                children.append(pid)
            assert all(os.waitpid(pid, 0)[1] == 0 for pid in children)
            first, second = learner.get(timeout=10), learner.get(timeout=10)
        finally:
            service.stop()
    assert [first["trigger_id"], second["trigger_id"]] == ["pre", "learn"]
    data = central.gather(second["actors"])
    assert sorted(data["reward"].tolist()) == [0, 1, 2, 3, 100, 101, 102, 103]
    assert data["text.length"].tolist() == [2] * 8
    assert service.errors == []
    assert cache.sent.tolist() == [[4, 4, 4], [4, 4, 4]]


def test_cache_refuses_to_overwrite_unsent_steps():
    name = f"artos-test-{uuid.uuid4().hex[:8]}"
    cache = SharedCache.create(name, SCHEMA, ["a0"], steps_per_actor=4)
    try:
        cache.write("a0", {"reward": np.zeros(4, np.float32)})
        with pytest.raises(BufferFullError, match="unsent steps of reward"):
            cache.write("a0", {"reward": np.zeros(1, np.float32)})
        cache.sent[0, SCHEMA.keys.index("reward")] = 2
        cache.write("a0", {"reward": np.ones(2, np.float32)})
        assert cache.read("a0", ["reward"], 2, 6)["reward"].tolist() == [0, 0, 1, 1]
    finally:
        cache.close()
