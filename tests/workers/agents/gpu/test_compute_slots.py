"""Stand-ins share the host's cores: the cache's compute slots bound how many requests execute
at once, in arrival order, and the wait counts as queue time."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from workers.agents.gpu.backend import Chunk, ServiceBackend
from workers.agents.gpu.cache import ServiceCache
from workers.agents.gpu.devices import Device, compute_slots, discover_devices


class Sleeper(ServiceBackend):
    """Executes by sleeping; records how many executions overlap and in which order."""

    def __init__(self, name: str, log: list[str], running: list[int]) -> None:
        super().__init__(name)
        self.log, self.running = log, running

    async def prepare(self) -> None:
        return None

    def device_mb(self, chunk_size: int) -> float:
        return 1.0

    async def restore(self, chunk: Chunk) -> None:
        return None

    async def evict(self, chunk: Chunk) -> None:
        return None

    async def execute(
        self, chunk: Chunk, request: Mapping[str, Any], priority: int
    ) -> dict[str, Any]:
        self.running[0] += 1
        self.running[1] = max(self.running[1], self.running[0])
        self.log.append(f"{self.name}:{request['id']}")
        await asyncio.sleep(0.02)
        self.running[0] -= 1
        return {}


def sleepers(log: list[str], running: list[int]) -> dict[str, ServiceBackend]:
    return {name: Sleeper(name, log, running) for name in ("a", "b", "c")}


async def test_one_slot_runs_requests_on_different_devices_one_at_a_time() -> None:
    log: list[str] = []
    running = [0, 0]  # now, most at once
    cache = ServiceCache(discover_devices(3, 10), sleepers(log, running), compute_slots=1)
    served = await asyncio.gather(
        *(cache.serve(name, [i], {"id": i}) for i, name in enumerate(("a", "b", "c")))
    )
    assert running[1] == 1
    assert log == ["a:0", "b:1", "c:2"]  # arrival order
    queued = sorted(s.timings.queue_s for s in served)
    assert queued[0] < 0.01 and queued[2] >= 0.035  # the third waited for two executions


async def test_without_slots_stand_ins_execute_together() -> None:
    log: list[str] = []
    running = [0, 0]
    cache = ServiceCache(discover_devices(3, 10), sleepers(log, running))
    await asyncio.gather(*(cache.serve(n, [i], {"id": i}) for i, n in enumerate("abc")))
    assert running[1] == 3


def test_compute_slots_must_allow_one_request() -> None:
    with pytest.raises(ValueError, match="compute_slots"):
        ServiceCache(discover_devices(2, 10), {}, compute_slots=0)


def test_stand_ins_get_the_host_cores_and_gpus_none() -> None:
    stand_ins = [Device(i, "cpu", 10) for i in range(64)]
    slots = compute_slots(stand_ins)
    assert slots is not None and 1 <= slots <= 64
    assert compute_slots(stand_ins[:1]) == 1
    assert compute_slots([Device(0, "cuda:0", 10)]) is None
