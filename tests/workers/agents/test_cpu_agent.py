"""The CPU agent end to end: the test plays the scheduler over real Redis (and over the
in-process transport of the embedded mode), publishing Dispatch/Cancel/TrajectoryEnd and reading
NodeRegister/Heartbeat/ActionResult from the pool's event stream."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.workers.agents.conftest import (
    SchedulerStandIn,
    bounded,
    cpu_dispatch,
    leftover_processes,
    redis_transport_for,
    wait_until,
)
from workers.agents.common.agent import AgentSettings
from workers.agents.cpu import CpuAgent, LocalBackend
from workers.transport import (
    AGENT_GROUP,
    ActionResult,
    Cancel,
    Delivery,
    Dispatch,
    Heartbeat,
    InProcessTransport,
    Message,
    NodeRegister,
    RedisStreamsTransport,
    StreamNames,
    TrajectoryEnd,
    Transport,
)

CORES = tuple(sorted(os.sched_getaffinity(0)))
NODE_A = f"node-a-{os.getpid()}"  # unique per test process: /proc scans see every process
NODE_B = f"node-b-{os.getpid()}"
FAST = AgentSettings(heartbeat_interval_s=0.1, reclaim_interval_s=0.2, read_block_ms=100)


def _dispatch(action: str, command: str, **fields: Any) -> Dispatch:
    return cpu_dispatch(action, command, **fields)


@pytest.fixture(params=["redis", "inprocess"])
async def transport(request: pytest.FixtureRequest, names: StreamNames) -> AsyncIterator[Transport]:
    if request.param == "redis":
        async with redis_transport_for(names) as redis_transport:
            yield redis_transport
    else:
        memory = InProcessTransport()
        yield memory
        await memory.close()


def local_agent(
    transport: Transport, names: StreamNames, tmp_path: Path, node: str = NODE_A, **extra: Any
) -> CpuAgent:
    """A CPU agent on the local backend (no cgroups) of pool ``cpu-pool``, fast settings."""
    return CpuAgent(
        transport=transport,
        node_id=node,
        pool="cpu-pool",
        backend=LocalBackend(node_id=node, work_root=tmp_path, cgroups=None),
        streams=names,
        settings=FAST,
        **extra,
    )


@pytest.fixture
async def running_agent(
    transport: Transport, names: StreamNames, tmp_path: Path
) -> AsyncIterator[tuple[CpuAgent, SchedulerStandIn]]:
    scheduler = SchedulerStandIn(transport, names, "cpu-pool")
    await scheduler.start()
    agent = local_agent(transport, names, tmp_path, memory_mb=2048)
    await agent.start()
    yield agent, scheduler
    await bounded(agent.stop(), "agent.stop()")


@pytest.mark.redis
async def test_registers_heartbeats_and_runs(
    running_agent: tuple[CpuAgent, SchedulerStandIn], transport: Transport, names: StreamNames
) -> None:
    agent, scheduler = running_agent
    [register] = await scheduler.wait_for(NodeRegister)
    assert register.node_id == NODE_A and register.kind == "cpu"
    assert register.cores == CORES and register.memory_mb == 2048
    assert sorted(c for cores in register.numa.values() for c in cores) == list(CORES)
    assert register.dispatch_stream == names.dispatch(NODE_A)
    await scheduler.wait_for(Heartbeat)

    await scheduler.send(
        NODE_A,
        _dispatch("ok", "echo hello {dop}", cores=CORES),
        _dispatch("bad", "echo oops >&2; exit 3"),
        _dispatch("slow", "sleep 5", timeout_s=0.3),
        _dispatch("big", "head -c 5000 /dev/zero", output_cap_bytes=100),
    )
    results = await scheduler.results(4)
    ok = results["ok"]
    assert (ok.status, ok.reason, ok.exit_code) == ("succeeded", None, 0)
    assert ok.output == f"hello {len(CORES)}\n"
    assert ok.node_id == NODE_A and ok.cores == CORES and ok.trajectory_id == "t"
    assert ok.started_at <= ok.finished_at
    assert (results["bad"].status, results["bad"].reason) == ("failed", "exit_code_nonzero")
    assert results["bad"].exit_code == 3 and results["bad"].output == "oops\n"
    assert (results["slow"].status, results["slow"].reason) == ("timed_out", "timeout")
    big = results["big"]
    assert (big.status, big.reason, big.output_truncated) == ("succeeded", "output_truncated", True)
    assert len(big.output) == 100
    # every dispatch was acknowledged after its result went out
    await wait_until(lambda: not agent._running)
    await asyncio.sleep(0.1)
    assert await transport.pending(names.dispatch(NODE_A), AGENT_GROUP) == []


@pytest.mark.redis
async def test_actions_run_concurrently_on_their_cores(
    running_agent: tuple[CpuAgent, SchedulerStandIn],
) -> None:
    _, scheduler = running_agent
    await scheduler.send(
        NODE_A,
        *[
            _dispatch(
                f"p{i}",
                "sleep 0.4; grep Cpus_allowed_list /proc/self/status",
                cores=(CORES[i % len(CORES)],),
                trajectory_id=f"t{i}",
            )
            for i in range(2)
        ],
    )
    results = await scheduler.results(2)
    first, second = results["p0"], results["p1"]
    assert first.started_at < second.finished_at and second.started_at < first.finished_at
    assert first.output.split()[-1] == str(CORES[0])


@pytest.mark.redis
async def test_cancel_kills_a_running_action(
    running_agent: tuple[CpuAgent, SchedulerStandIn],
) -> None:
    agent, scheduler = running_agent
    await scheduler.send(NODE_A, _dispatch("long", "setsid sleep 60 & sleep 61", timeout_s=30))
    await wait_until(lambda: "long:1" in agent.running_keys)
    await wait_until(lambda: len(leftover_processes(f"{NODE_A}/long:1")) >= 2)
    await scheduler.send(NODE_A, Cancel(action_id="long"))
    result = (await scheduler.results(1))["long"]
    assert (result.status, result.reason) == ("cancelled", "cancelled")
    assert leftover_processes(f"{NODE_A}/long:1") == []
    # a cancel that arrives before its dispatch wins too
    await scheduler.send(NODE_A, Cancel(action_id="early", attempt=1))
    await scheduler.send(NODE_A, _dispatch("early", "echo ran"))
    results = await scheduler.results(2)
    assert results["early"].status == "cancelled"


@pytest.mark.redis
async def test_trajectory_end_removes_its_directory(
    running_agent: tuple[CpuAgent, SchedulerStandIn],
) -> None:
    agent, scheduler = running_agent
    backend = agent.backend
    assert isinstance(backend, LocalBackend)
    await scheduler.send(NODE_A, _dispatch("w", "echo kept > state", trajectory_id="traj"))
    await scheduler.send(NODE_A, _dispatch("r", "cat state", trajectory_id="traj"))
    # order within a trajectory is the scheduler's job; here the read may race the write
    results = await scheduler.results(2)
    assert results["w"].status == "succeeded"
    assert backend.trajectory_dir("traj").exists()
    await scheduler.send(NODE_A, TrajectoryEnd(trajectory_id="traj"))
    await wait_until(lambda: not backend.trajectory_dir("traj").exists())
    await scheduler.send(NODE_A, _dispatch("last", "true", trajectory_id="t2", end_trajectory=True))
    await scheduler.results(3)
    await wait_until(lambda: not backend.trajectory_dir("t2").exists())


@pytest.mark.redis
async def test_bad_cores_and_kind_are_infra_errors(
    running_agent: tuple[CpuAgent, SchedulerStandIn],
) -> None:
    _, scheduler = running_agent
    await scheduler.send(NODE_A, _dispatch("far", "true", cores=(999,)))
    result: ActionResult = (await scheduler.results(1))["far"]
    assert (result.status, result.reason) == ("failed", "infra_error")
    assert "999" in result.output


async def test_stop_ends_running_actions_as_agent_lost(names: StreamNames, tmp_path: Path) -> None:
    transport = InProcessTransport()
    scheduler = SchedulerStandIn(transport, names, "cpu-pool")
    await scheduler.start()
    agent = local_agent(transport, names, tmp_path, NODE_B)
    await agent.start()
    await scheduler.send(NODE_B, _dispatch("long", "sleep 30"))
    await wait_until(lambda: bool(agent.running_keys))
    await agent.stop()
    result = (await scheduler.results(1))["long"]
    assert (result.status, result.reason) == ("failed", "agent_lost")
    assert leftover_processes(f"{NODE_B}/") == []
    await transport.close()


def test_redis_transport_type() -> None:
    assert issubclass(RedisStreamsTransport, Transport)


@pytest.mark.redis
async def test_noop_actions_are_answered_in_batches(
    running_agent: tuple[CpuAgent, SchedulerStandIn], transport: Transport, names: StreamNames
) -> None:
    _, scheduler = running_agent
    noops = [Dispatch(action_id=f"n{i}", attempt=1, job_id="j", kind="noop") for i in range(300)]
    await scheduler.send(NODE_A, *noops)
    results = await scheduler.results(300)
    assert {r.status for r in results.values()} == {"succeeded"}
    assert sorted(results) == sorted(f"n{i}" for i in range(300))
    for _ in range(50):
        if not await transport.pending(names.dispatch(NODE_A), AGENT_GROUP):
            break
        await asyncio.sleep(0.02)
    assert await transport.pending(names.dispatch(NODE_A), AGENT_GROUP) == []


class _CallOrder(InProcessTransport):
    """The in-process transport, noting the agent's reads of its dispatch stream and its result
    publications in the order they are made."""

    def __init__(self, dispatch_stream: str) -> None:
        super().__init__()
        self.dispatch_stream = dispatch_stream
        self.calls: list[str] = []

    async def read(
        self, stream: str, group: str, consumer: str, *, count: int = 64, block_ms: int = 1000
    ) -> list[Delivery]:
        if stream == self.dispatch_stream:
            self.calls.append("read")
        deliveries = await super().read(stream, group, consumer, count=count, block_ms=block_ms)
        if stream == self.dispatch_stream:
            self.calls.extend(
                f"delivered {d.message.action_id}"
                for d in deliveries
                if isinstance(d.message, Dispatch)
            )
        return deliveries

    async def publish_many(self, stream: str, messages: Sequence[Message]) -> list[str]:
        self.calls.extend(f"result {m.action_id}" for m in messages if isinstance(m, ActionResult))
        return await super().publish_many(stream, messages)


async def test_a_noop_result_is_sent_before_the_next_blocking_read(
    names: StreamNames, tmp_path: Path
) -> None:
    """Latency of single actions: the answer to an inline dispatch must not wait behind the
    agent's next (blocking) read of its stream."""
    transport = _CallOrder(names.dispatch(NODE_A))
    scheduler = SchedulerStandIn(transport, names, "cpu-pool")
    await scheduler.start()
    agent = local_agent(transport, names, tmp_path)
    await agent.start()
    try:
        await scheduler.send(NODE_A, Dispatch(action_id="n1", attempt=1, job_id="j", kind="noop"))
        assert (await scheduler.results(1))["n1"].status == "succeeded"
    finally:
        await bounded(agent.stop(), "agent.stop()")
        await transport.close()
    delivered = transport.calls.index("delivered n1")
    assert transport.calls[delivered + 1] == "result n1", transport.calls  # then the next read
