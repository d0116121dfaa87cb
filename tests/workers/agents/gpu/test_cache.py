"""The service cache: EOE with LRU eviction over real PyTorch services on CPU stand-in devices.

The stand-ins' memory is set so that two of the small models fit on a device and three do not
(each reward model takes about 0.44 MB, the teacher about 0.56 MB).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from workers.agents.gpu.backend import ServiceError
from workers.agents.gpu.cache import CacheError, ServiceCache
from workers.agents.gpu.devices import discover_devices
from workers.agents.gpu.torch_backend import TorchService

REQUEST = {"input_ids": [[1, 5, 6, 7]]}


@pytest.fixture
async def cache(checkpoints: dict[str, Path]) -> ServiceCache:
    services = {
        "a": TorchService("a", checkpoints["reward"], "reward"),
        "b": TorchService("b", checkpoints["reward2"], "reward"),
        "c": TorchService("c", checkpoints["reward3"], "reward"),
        "teacher": TorchService("teacher", checkpoints["teacher"], "logprobs"),
    }
    ticks = iter(range(1, 1_000_000))
    cache = ServiceCache(discover_devices(4, 1), services, clock=lambda: float(next(ticks)))
    events = await cache.prepare()
    assert [e.kind for e in events] == ["load"] * 4
    return cache


def kinds(served_events: tuple[object, ...]) -> list[tuple[str, str]]:
    return [(e.kind, e.service) for e in served_events]  # type: ignore[attr-defined]


async def test_a_warm_chunk_serves_without_restoring(cache: ServiceCache) -> None:
    first = await cache.serve("a", [0], REQUEST)
    second = await cache.serve("a", [0], REQUEST)
    assert (first.warm, kinds(first.events)) == (False, [("restore", "a")])
    assert (second.warm, second.events) == (True, ())
    assert second.output == first.output
    assert cache.warm_chunks("a") == [(0, 1)]
    assert cache.restores == 1


async def test_the_least_recently_used_instance_is_evicted(cache: ServiceCache) -> None:
    await cache.serve("a", [0], REQUEST)
    await cache.serve("b", [0], REQUEST)
    await cache.serve("a", [0], REQUEST)  # a is now more recent than b
    served = await cache.serve("c", [0], REQUEST)
    assert kinds(served.events) == [("evict", "b"), ("restore", "c")]
    assert [r["service"] for r in cache.resident()] == ["a", "c"]
    assert cache.evictions == 1


async def test_only_instances_overlapping_the_chunk_are_evicted(cache: ServiceCache) -> None:
    await cache.serve("a", [1], REQUEST)
    await cache.serve("b", [0], REQUEST)
    await cache.serve("c", [2], REQUEST)
    served = await cache.serve("teacher", [0, 1], REQUEST)
    # The teacher needs 0.56 MB on both devices: a and b go (LRU first), c on device 2 stays.
    assert kinds(served.events) == [("evict", "a"), ("evict", "b"), ("restore", "teacher")]
    assert sorted(r["service"] for r in cache.resident()) == ["c", "teacher"]
    assert cache.memory_used[3] == 0.0


async def test_each_chunk_size_is_its_own_instance(cache: ServiceCache) -> None:
    await cache.serve("teacher", [0, 1], REQUEST)
    narrow = await cache.serve("teacher", [0], REQUEST)
    assert kinds(narrow.events) == [("evict", "teacher"), ("restore", "teacher")]
    assert cache.warm_chunks("teacher") == [(0, 1)]


async def test_requests_on_one_chunk_run_one_at_a_time(cache: ServiceCache) -> None:
    first, second = await asyncio.gather(
        cache.serve("a", [2, 3], REQUEST), cache.serve("a", [2, 3], REQUEST)
    )
    assert sorted([first.warm, second.warm]) == [False, True]
    assert cache.restores == 1


async def test_memory_is_accounted_and_returned(cache: ServiceCache) -> None:
    await cache.serve("a", [0], REQUEST)
    per_device = cache.services["a"].device_mb(1)
    assert cache.memory_used[0] == pytest.approx(per_device)
    await cache.close()
    assert cache.memory_used == {0: 0.0, 1: 0.0, 2: 0.0, 3: 0.0}


@pytest.mark.parametrize(
    ("service", "gpus", "message"),
    [
        ("nope", [0], "service: 'nope' is not hosted here"),
        ("a", [1, 2], "gpus: .* not an aligned buddy chunk"),
        ("a", [7], "gpus: \\[7\\] are not on this node"),
    ],
)
async def test_requests_it_cannot_serve_name_the_field(
    cache: ServiceCache, service: str, gpus: list[int], message: str
) -> None:
    with pytest.raises(CacheError, match=message):
        await cache.serve(service, gpus, REQUEST)


async def test_a_service_larger_than_a_device_is_refused(checkpoints: dict[str, Path]) -> None:
    services = {"a": TorchService("a", checkpoints["reward"], "reward")}
    small = ServiceCache(discover_devices(1, 1), services)
    await small.prepare()
    small._capacity[0] = 0.1  # a device smaller than the model
    with pytest.raises(CacheError, match="gpus: 'a' needs 0 MB on each of 1 devices"):
        await small.serve("a", [0], REQUEST)
    assert small.memory_used[0] == 0.0


async def test_a_bad_request_leaves_the_chunk_usable(cache: ServiceCache) -> None:
    with pytest.raises(ServiceError, match="input_ids"):
        await cache.serve("a", [0], {"input_ids": "text"})
    served = await cache.serve("a", [0], REQUEST)
    assert served.warm  # restored by the failed request, which failed only at execution
