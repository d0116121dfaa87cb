"""The scheduler service running a GPU pool with a real GPU agent (PyTorch services on CPU
stand-in devices), on the in-process transport and an in-memory store: chunks allocated per
action, the warm chunk preferred, the service cache in the scheduler's state and in its
recovery after a crash."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.workers.scheduler.memory_store import MemoryStore
from workers.agents.common.agent import AgentSettings
from workers.agents.gpu.agent import GpuAgent
from workers.agents.gpu.cache import ServiceCache
from workers.agents.gpu.checkpoints import create_checkpoint
from workers.agents.gpu.devices import discover_devices
from workers.agents.gpu.torch_backend import TorchService
from workers.scheduler import ActionRecord, SchedulerService, ServiceConfig
from workers.scheduler.gpu_pool import LiveGpuTopology
from workers.transport import ActionsSubmitted, InProcessTransport, StreamNames

pytestmark = pytest.mark.timeout(120)
POOL = "gpu"
NODE = "gpu-node-0"
FAST = AgentSettings(heartbeat_interval_s=0.1, reclaim_interval_s=0.2, read_block_ms=50)


class GpuStore(MemoryStore):
    def pool_kind(self, pool: str) -> str:
        return "gpu"


def gpu_record(action_id: int, service: str, **fields: object) -> ActionRecord:
    return ActionRecord(
        action_id=action_id,
        job_id=1,
        kind="gpu",
        demand={"gpu": {"min": 1, "max": 1}},
        submitted_at=time.time(),
        timeout_s=60.0,
        service=service,
        **{"request": {"input_ids": [[1, 5, 6, 7]]}, **fields},  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gpu-service")
    return {
        "rm": create_checkpoint(root / "rm", "reward", seed=1),
        "teacher": create_checkpoint(root / "teacher", "logprobs", seed=2),
    }


class Harness:
    def __init__(self, checkpoints: dict[str, Path]) -> None:
        self.transport = InProcessTransport()
        self.streams = StreamNames(prefix="gpu-svc-test")
        self.store = GpuStore()
        services = {
            "rm": TorchService("rm", checkpoints["rm"], "reward"),
            "teacher": TorchService("teacher", checkpoints["teacher"], "logprobs"),
        }
        self.agent = GpuAgent(
            transport=self.transport,
            node_id=NODE,
            pool=POOL,
            cache=ServiceCache(discover_devices(2, 1), services),
            streams=self.streams,
            settings=FAST,
        )
        self.stop = asyncio.Event()
        self.service: SchedulerService | None = None
        self.task: asyncio.Task[None] | None = None

    async def start_service(self) -> SchedulerService:
        self.stop = asyncio.Event()
        self.service = SchedulerService(
            config=ServiceConfig(pool=POOL, housekeeping_interval_s=0.1, block_ms=20),
            transport=self.transport,
            store=self.store,
            streams=self.streams,
        )
        self.task = asyncio.create_task(self.service.run(self.stop))
        await asyncio.wait_for(self.service.started.wait(), 10)
        return self.service

    async def crash_service(self) -> None:
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task

    async def submit(self, *records: ActionRecord) -> None:
        for record in records:
            self.store.records[record.action_id] = record
        ids = tuple(record.action_id for record in records)
        await self.transport.publish(self.streams.events(POOL), ActionsSubmitted(action_ids=ids))

    async def wait_until(self, condition: object, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():  # type: ignore[operator]
            assert time.monotonic() < deadline, "condition not reached in time"
            await asyncio.sleep(0.02)

    async def finished(self, *action_ids: int) -> None:
        await self.wait_until(lambda: all(i in self.store.finished for i in action_ids))

    def topology(self) -> LiveGpuTopology:
        assert self.service is not None and self.service.scheduler is not None
        topology = self.service.scheduler.topology
        assert isinstance(topology, LiveGpuTopology)
        return topology


@pytest.fixture
async def harness(checkpoints: dict[str, Path]) -> AsyncIterator[Harness]:
    harness = Harness(checkpoints)
    await harness.start_service()
    await harness.agent.start()
    try:
        yield harness
    finally:
        harness.stop.set()
        await harness.agent.stop()
        if harness.task is not None and not harness.task.done():
            await asyncio.wait_for(harness.task, 10)


async def test_gpu_actions_run_on_chunks_and_return_the_services_output(
    harness: Harness,
) -> None:
    await harness.wait_until(lambda: NODE in harness.store.nodes)
    await harness.submit(gpu_record(1, "rm"), gpu_record(2, "teacher"))
    await harness.finished(1, 2)
    rm, teacher = harness.store.finished[1], harness.store.finished[2]
    assert rm.status == teacher.status == "succeeded"
    assert len(json.loads(rm.output)["scores"]) == 1
    assert len(json.loads(teacher.output)["logprobs"][0]) == 3
    gpus = {harness.store.columns[i]["allocation"]["gpus"][0] for i in (1, 2)}
    assert gpus <= {0, 1}


async def test_warm_chunks_are_preferred_and_the_cache_survives_a_crash(
    harness: Harness,
) -> None:
    """Each device holds one of the two models (1 MB each): the scheduler keeps each service on
    the device where it is resident, so only the first request of each pays a restore."""
    await harness.wait_until(lambda: NODE in harness.store.nodes)
    for action_id, service in [(1, "rm"), (2, "teacher"), (3, "teacher"), (4, "rm")]:
        await harness.submit(gpu_record(action_id, service))
        await harness.finished(action_id)
        assert harness.store.finished[action_id].status == "succeeded"
        # Wait for the agent's report of the cache before the next pass uses it.
        resident = min(action_id, 2)
        await harness.wait_until(lambda n=resident: len(harness.store.nodes[NODE].cache) == n)
    gpus = [harness.store.columns[i]["allocation"]["gpus"] for i in (1, 2, 3, 4)]
    assert gpus == [[0], [1], [1], [0]]
    assert harness.agent.cache.restores == 2 and harness.agent.cache.evictions == 0

    await harness.crash_service()
    await harness.agent.stop()  # no heartbeat may correct the rebuilt view: it is the store's
    await harness.start_service()
    cached = {(s, start, size) for s, _, start, size in harness.topology().cache_last_used}
    assert cached == {("rm", 0, 1), ("teacher", 1, 1)}


async def test_a_request_the_service_refuses_fails_with_the_reason(harness: Harness) -> None:
    await harness.wait_until(lambda: NODE in harness.store.nodes)
    await harness.submit(gpu_record(1, "rm", request={"input_ids": [[1, 10_000]]}))
    await harness.finished(1)
    result = harness.store.finished[1]
    assert (result.status, result.reason) == ("failed", "bad_request")
    assert "input_ids[0]" in result.output
