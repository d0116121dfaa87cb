"""The buffer service follows the definitions in Redis: loaded at start, one bad definition
skipped without stopping the rest, an unchanged announcement keeping the buffer's data."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator

import numpy as np
import pytest
import redis

from workers.buffers.definitions import BufferNames, buffer_from_definition
from workers.buffers.follower import DefinitionFollower
from workers.buffers.service import BufferServer

pytestmark = pytest.mark.redis


def definition(name: str, capacity: int = 4) -> dict[str, object]:
    return {
        "name": name,
        "schema": {"obs": {"shape": [2], "dtype": "float32"}},
        "capacity": capacity,
        "eviction": "fifo",
        "prioritised": False,
        "triggers": [
            {"name": "t", "kind": "data_key", "params": {"n": 1, "size": 1, "keys": ["obs"]}}
        ],
    }


@pytest.fixture
def names(redis_url: str) -> Iterator[BufferNames]:
    prefix = f"looptest-{uuid.uuid4().hex[:12]}"
    yield BufferNames(prefix)
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{prefix}:*"))
    if keys:
        client.delete(*keys)
    client.close()


def _eventually(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_follows_the_hash_and_its_announcements(redis_url: str, names: BufferNames) -> None:
    client = redis.Redis.from_url(redis_url)
    client.hset(names.definitions, "1.good", json.dumps(definition("1.good")))
    client.hset(names.definitions, "1.bad", json.dumps({"name": "1.bad", "schema": {}}))
    server = BufferServer().start()
    follower = DefinitionFollower(server, redis_url, names).start()
    try:
        assert follower.loaded.wait(10)
        assert set(server.buffers) == {"1.good"}  # the bad one logged and skipped
        good = server.buffers["1.good"]
        good.put("a", {"obs": np.zeros((1, 2), np.float32)})
        client.publish(names.changed, "1.good")  # announced again, unchanged
        client.hset(names.definitions, "2.new", json.dumps(definition("2.new", 8)))
        client.publish(names.changed, "2.new")
        _eventually(lambda: "2.new" in server.buffers)
        assert server.buffers["1.good"] is good and good.snapshot()["held"] == 1
        client.hdel(names.definitions, "1.good")
        client.publish(names.changed, "1.good")
        _eventually(lambda: "1.good" not in server.buffers)
    finally:
        follower.stop()
        server.stop()
        client.close()


def test_a_definition_builds_its_buffer_and_binds_its_triggers() -> None:
    buffer = buffer_from_definition(definition("x", 4))
    firings = buffer.put("a", {"obs": np.ones((1, 2), np.float32)})
    assert buffer.capacity == 4 and [f["trigger_id"] for f in firings] == ["t"]
