"""The API agent against the real local rate-limited service (arl-tangram §5.1 peers)."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from tests.workers.agents.conftest import SchedulerStandIn
from workers.agents.api import ApiAgent
from workers.agents.common.agent import AgentSettings
from workers.testing.rate_limited_api import RateLimit, RunningApi, start_rate_limited_api
from workers.transport import (
    ApiRequestSpec,
    Dispatch,
    InProcessTransport,
    NodeRegister,
    RedisStreamsTransport,
    StreamNames,
)


@pytest.fixture
def api() -> Iterator[RunningApi]:
    running = start_rate_limited_api(
        RateLimit(concurrency=2, quota=5, period_s=30.0, latency_s=0.3)
    )
    yield running
    running.stop()


def _call(action: str, url: str, **fields: Any) -> Dispatch:
    spec = ApiRequestSpec("POST", url, {"X-Test": "1"}, {"action": action}, 5.0)
    base = Dispatch(action_id=action, attempt=1, job_id="j", kind="api", api=spec)
    return dataclasses.replace(base, **fields)


@pytest.fixture
async def agent_and_scheduler(
    names: StreamNames,
) -> AsyncIterator[tuple[ApiAgent, SchedulerStandIn]]:
    transport = InProcessTransport()
    scheduler = SchedulerStandIn(transport, names, "api-pool")
    await scheduler.start()
    agent = ApiAgent(
        transport=transport,
        node_id="api-1",
        pool="api-pool",
        max_connections=16,
        streams=names,
        settings=AgentSettings(heartbeat_interval_s=0.1, read_block_ms=100),
    )
    await agent.start()
    yield agent, scheduler
    await agent.stop()
    await transport.close()


def test_service_enforces_concurrency_and_quota(api: RunningApi) -> None:
    async def burst() -> list[int]:
        async with httpx.AsyncClient(trust_env=False) as client:
            responses = await asyncio.gather(
                *[client.post(f"{api.url}/v1/x", json={"i": i}) for i in range(4)]
            )
        return [r.status_code for r in responses]

    codes = asyncio.run(burst())
    assert sorted(codes) == [200, 200, 429, 429]  # two at once: the other two hit concurrency
    with httpx.Client(trust_env=False) as client:
        later = [client.post(f"{api.url}/v1/x").status_code for _ in range(4)]
        assert later == [200, 200, 200, 429]  # 5 calls per period: the 6th hits the quota
        assert client.post(f"{api.url}/v1/x").json() == {"error": "quota"}
        stats = client.get(f"{api.url}/stats").json()
    assert stats["served"] == 5 and stats["max_in_flight"] == 2
    assert stats["rejected_concurrency"] == 2 and stats["rejected_quota"] == 2
    assert api.stats().served == 5


async def test_agent_calls_and_reports_rate_limiting(
    api: RunningApi, agent_and_scheduler: tuple[ApiAgent, SchedulerStandIn]
) -> None:
    _, scheduler = agent_and_scheduler
    [register] = await scheduler.wait_for(NodeRegister)
    assert (register.kind, register.concurrency) == ("api", 16)
    await scheduler.send("api-1", *[_call(f"c{i}", f"{api.url}/v1/tool") for i in range(3)])
    results = await scheduler.results(3)
    statuses = sorted((r.status, r.reason, r.http_status) for r in results.values())
    assert statuses == [
        ("failed", "rate_limited", 429),
        ("succeeded", None, 200),
        ("succeeded", None, 200),
    ]
    ok = next(r for r in results.values() if r.status == "succeeded")
    assert f'"action": "{ok.action_id}"' in ok.output


async def test_agent_timeout_refusal_and_cap(
    agent_and_scheduler: tuple[ApiAgent, SchedulerStandIn],
) -> None:
    _, scheduler = agent_and_scheduler
    with start_rate_limited_api(RateLimit(concurrency=8, latency_s=1.0)) as slow:
        with socket.socket() as probe:  # a port nobody listens on
            probe.bind(("127.0.0.1", 0))
            dead_port = probe.getsockname()[1]
        await scheduler.send(
            "api-1",
            _call("slow", f"{slow.url}/x", timeout_s=0.2),
            _call("refused", f"http://127.0.0.1:{dead_port}/x"),
            _call("missing", f"{slow.url}/stats", output_cap_bytes=10),
        )
        results = await scheduler.results(3)
    assert (results["slow"].status, results["slow"].reason) == ("timed_out", "timeout")
    assert (results["refused"].status, results["refused"].reason) == ("failed", "infra_error")
    capped = results["missing"]
    assert (capped.status, capped.reason, capped.output_truncated) == (
        "succeeded",
        "output_truncated",
        True,
    )
    assert len(capped.output) == 10


async def test_cpu_dispatch_to_api_agent_is_an_infra_error(
    agent_and_scheduler: tuple[ApiAgent, SchedulerStandIn],
) -> None:
    _, scheduler = agent_and_scheduler
    await scheduler.send(
        "api-1", Dispatch(action_id="x", attempt=1, job_id="j", kind="cpu", command="true")
    )
    result = (await scheduler.results(1))["x"]
    assert (result.status, result.reason) == ("failed", "infra_error")


@pytest.mark.redis
async def test_api_agent_over_redis(
    api: RunningApi, redis_transport: RedisStreamsTransport, names: StreamNames
) -> None:
    scheduler = SchedulerStandIn(redis_transport, names, "api-pool")
    await scheduler.start()
    agent = ApiAgent(transport=redis_transport, node_id="api-r", pool="api-pool", streams=names)
    await agent.start()
    try:
        await scheduler.send("api-r", _call("one", f"{api.url}/v1/tool"))
        result = (await scheduler.results(1))["one"]
        assert (result.status, result.http_status) == ("succeeded", 200)
    finally:
        await agent.stop()
