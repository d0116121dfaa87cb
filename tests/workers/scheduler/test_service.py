"""The scheduler service with a real local CPU agent on the in-process transport and an in-memory
store: crash-restart without running an action twice, no-op dispatches, unsatisfiable demands."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.workers.scheduler.memory_store import MemoryStore
from workers.agents.common.agent import AgentSettings
from workers.agents.cpu import CpuAgent, LocalBackend
from workers.scheduler import ActionRecord, Applied, SchedulerService, ServiceConfig
from workers.scheduler.specs import dispatch_for, dispatch_kind
from workers.transport import ActionsSubmitted, InProcessTransport, StreamNames

pytestmark = pytest.mark.timeout(60)
POOL = "cpu"
CORES = sorted(os.sched_getaffinity(0))[:2]
FAST = AgentSettings(heartbeat_interval_s=0.1, reclaim_interval_s=0.2, read_block_ms=50)


def _record(action_id: int, command: str | None, **fields: object) -> ActionRecord:
    return ActionRecord(
        action_id=action_id,
        job_id=1,
        kind="cpu",
        demand={"cpu": {"min": 1, "max": 1}},
        submitted_at=time.time(),
        command=command,
        timeout_s=30.0,
        **fields,  # type: ignore[arg-type]
    )


class Harness:
    def __init__(self, tmp_path: Path, store: MemoryStore, *, store_inline: bool = False) -> None:
        self.store_inline = store_inline
        self.transport = InProcessTransport()
        self.streams = StreamNames(prefix="svc-test")
        self.store = store
        # Unique per harness: the local backend's cgroups are named by node and action, and a
        # leftover sweep of one test must never find another's (pytest -n runs them side by side).
        self.node = f"node-{uuid.uuid4().hex[:8]}"
        self.backend = LocalBackend(node_id=self.node, work_root=tmp_path / "work")
        self.agent = CpuAgent(
            transport=self.transport,
            node_id=self.node,
            pool=POOL,
            backend=self.backend,
            cores=CORES,
            streams=self.streams,
            settings=FAST,
        )
        self.stop = asyncio.Event()
        self.service: SchedulerService | None = None
        self.task: asyncio.Task[None] | None = None

    async def start_service(self) -> SchedulerService:
        self.stop = asyncio.Event()
        self.service = SchedulerService(
            config=ServiceConfig(
                pool=POOL, housekeeping_interval_s=0.1, block_ms=20, store_inline=self.store_inline
            ),
            transport=self.transport,
            store=self.store,
            streams=self.streams,
        )
        self.task = asyncio.create_task(self.service.run(self.stop))
        await asyncio.wait_for(self.service.started.wait(), 10)
        return self.service

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Harness]:
        """The service and the agent started, then stopped on the way out (a fixture's body)."""
        await self.start_service()
        await self.agent.start()
        try:
            yield self
        finally:
            await self.close()

    async def close(self) -> None:
        """Stop the service and the agent (a fixture's teardown)."""
        self.stop.set()
        await self.agent.stop()
        if self.task is not None and not self.task.done():
            await asyncio.wait_for(self.task, 10)

    async def crash_service(self) -> None:
        """Like kill -9: the task dies where it is, nothing is flushed or acknowledged."""
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task

    async def submit(self, *action_ids: int) -> None:
        await self.transport.publish(
            self.streams.events(POOL), ActionsSubmitted(action_ids=tuple(action_ids))
        )

    async def wait_status(self, action_id: int, statuses: set[str], timeout_s: float = 20) -> None:
        deadline = time.monotonic() + timeout_s
        while self.store.records[action_id].status not in statuses:
            assert time.monotonic() < deadline, self.store.records[action_id]
            await asyncio.sleep(0.02)


@pytest.fixture(params=[False, True], ids=["store-thread", "store-inline"])
async def harness(
    tmp_path: Path, request: pytest.FixtureRequest, starts_processes: None
) -> AsyncIterator[Harness]:
    """Both ways to call the store: a thread of its own, the loop's thread (run_scheduler)."""
    async with Harness(tmp_path, MemoryStore(), store_inline=request.param).running() as running:
        yield running


async def test_the_store_is_called_where_the_config_says(harness: Harness) -> None:
    harness.store.records[7] = _record(7, None)
    await harness.submit(7)
    await harness.wait_status(7, {"succeeded"})
    loop_thread = threading.get_ident()  # the test's loop is the service's
    if harness.store_inline:
        assert harness.store.apply_threads == {loop_thread}
    else:
        assert harness.store.apply_threads and loop_thread not in harness.store.apply_threads


async def test_restart_redispatches_without_running_twice(harness: Harness, tmp_path: Path) -> None:
    # Sandboxed: the action writes where its runs can be counted, its trajectory's directory.
    harness.store.records[1] = _record(1, "sleep 0.3; echo ran >> runs.txt", trajectory_id=7)
    runs = harness.backend.trajectory_dir("7") / "runs.txt"
    await harness.submit(1)
    await harness.wait_status(1, {"scheduled", "running"})
    await harness.crash_service()  # its dispatch is out; its result will wait in the stream
    await asyncio.sleep(0.6)  # the agent finishes attempt 1 meanwhile
    service = await harness.start_service()  # rebuild: re-dispatches attempt 1 on its cores
    assert service.counters.dispatched == 1
    await harness.wait_status(1, {"succeeded"})
    await asyncio.sleep(0.3)  # a second run would have appended by now
    assert runs.read_text().split() == ["ran"]
    assert harness.store.finished[1].attempt == 1


async def test_an_action_without_a_command_is_a_noop(harness: Harness) -> None:
    harness.store.records[2] = _record(2, None)
    await harness.submit(2)
    await harness.wait_status(2, {"succeeded"})
    result = harness.store.finished[2]
    assert result.exit_code is None and result.output == ""
    assert result.started_at == result.finished_at  # answered inline, no process


async def test_a_demand_no_node_can_meet_fails_with_its_reason(harness: Harness) -> None:
    harness.store.records[3] = replace_demand(_record(3, "true"), {"cpu": {"min": 64, "max": 64}})
    await harness.submit(3)
    await harness.wait_status(3, {"failed"})
    assert harness.store.finished[3].reason


def replace_demand(record: ActionRecord, demand: dict[str, object]) -> ActionRecord:
    from dataclasses import replace

    return replace(record, demand=demand)


def test_dispatch_kind() -> None:
    assert dispatch_kind(_record(1, None)) == "noop"
    assert dispatch_kind(_record(1, "  ")) == "noop"
    assert dispatch_kind(_record(1, "echo hi")) == "cpu"
    dispatch = dispatch_for(_record(1, None), attempt=1, cores=(0,))
    assert dispatch.kind == "noop" and dispatch.command is None


async def test_a_failed_batch_is_recovered_by_rebuilding(harness: Harness) -> None:
    """The store fails once mid-batch (a database blip): the service rebuilds, nothing is lost."""
    real_apply = harness.store.apply
    failures: list[bool] = []

    def flaky_apply(**changes: object) -> Applied:
        if changes.get("scheduled") and not failures:
            failures.append(True)
            raise ConnectionError("database went away")
        return real_apply(**changes)  # type: ignore[arg-type]

    harness.store.apply = flaky_apply  # type: ignore[method-assign]
    harness.store.records[4] = _record(4, "echo recovered")
    await harness.submit(4)
    await harness.wait_status(4, {"succeeded"})
    assert failures and harness.service is not None and harness.service.counters.recoveries == 1
    assert harness.store.finished[4].output.strip() == "recovered"


async def test_a_draining_node_finishes_its_work_but_takes_nothing_new(harness: Harness) -> None:
    harness.store.records[5] = _record(5, "sleep 0.4; echo first")
    await harness.submit(5)
    await harness.wait_status(5, {"scheduled", "running"})
    harness.store.draining = {harness.node}  # an operator drains the only node
    await asyncio.sleep(0.5)  # the service reads drains with its policy, about once a second
    assert harness.service is not None
    for _ in range(40):
        if harness.service.draining == {harness.node}:
            break
        await asyncio.sleep(0.05)
    harness.store.records[6] = _record(6, "echo second")
    await harness.submit(6)
    await harness.wait_status(5, {"succeeded"})  # what ran there finishes
    await asyncio.sleep(0.5)
    assert harness.store.records[6].status == "queued"  # nothing new lands on it
    assert harness.service.scheduler is not None
    assert harness.service.scheduler.head_wait_reason() is not None
    harness.store.draining = set()  # resume
    await harness.wait_status(6, {"succeeded"})


async def test_a_queued_action_never_announced_is_found_and_run(harness: Harness) -> None:
    """The web committed it and died before announcing it, and no client sent it again: the
    service's sweep of the store finds it; an announced one is not queued twice."""
    assert harness.service is not None
    harness.service.config.orphan_sweep_s = 0.2
    harness.service.config.orphan_min_age_s = 0.0
    harness.store.records[5] = _record(5, "echo found")  # in the store, no announcement
    harness.store.records[6] = _record(6, "echo announced")
    await harness.submit(6)
    await harness.wait_status(5, {"succeeded"})
    await harness.wait_status(6, {"succeeded"})
    assert harness.store.finished[5].output.strip() == "found"
    assert harness.service.counters.unannounced_found >= 1
    assert harness.store.finished[5].attempt == 1 and harness.store.finished[6].attempt == 1
