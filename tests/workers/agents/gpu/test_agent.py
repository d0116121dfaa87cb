"""The GPU agent over real Redis: registration, warm and cold requests, faults, the process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.workers.agents.conftest import REDIS_URL, SchedulerStandIn
from workers.agents.common.agent import AgentSettings
from workers.agents.gpu.agent import GpuAgent
from workers.agents.gpu.cache import ServiceCache
from workers.agents.gpu.devices import discover_devices
from workers.agents.gpu.torch_backend import TorchService
from workers.transport import Dispatch, Heartbeat, NodeRegister, RedisStreamsTransport, StreamNames

pytestmark = pytest.mark.redis
REPO_ROOT = Path(__file__).resolve().parents[4]
POOL = "gpu-pool"
NODE = f"gpu-node-{os.getpid()}"
SEQUENCES = [[1, 5, 6, 7], [1, 2, 3]]


def gpu_dispatch(action: str, service: str, gpus: tuple[int, ...], **fields: Any) -> Dispatch:
    return Dispatch(
        action_id=action, attempt=1, job_id="j", kind="gpu", gpus=gpus, service=service,
        request=fields.pop("request", {"input_ids": SEQUENCES}), timeout_s=60, **fields,
    )  # fmt: skip


@pytest.fixture
async def running(
    redis_transport: RedisStreamsTransport,
    names: StreamNames,
    checkpoints: dict[str, Path],
    tmp_path: Path,
) -> AsyncIterator[tuple[GpuAgent, SchedulerStandIn]]:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text('{"model_type": "llama"}')
    services = {
        "rm": TorchService("rm", checkpoints["reward"], "reward"),
        "teacher": TorchService("teacher", checkpoints["teacher"], "logprobs"),
        "broken": TorchService("broken", tmp_path / "broken", "reward"),
    }
    scheduler = SchedulerStandIn(redis_transport, names, POOL)
    await scheduler.start()
    agent = GpuAgent(
        transport=redis_transport,
        node_id=NODE,
        pool=POOL,
        cache=ServiceCache(discover_devices(4, 1), services),
        streams=names,
        settings=AgentSettings(heartbeat_interval_s=0.1, read_block_ms=100),
    )
    await agent.start()
    yield agent, scheduler
    await agent.stop()


async def test_registers_devices_services_and_failed_loads(
    running: tuple[GpuAgent, SchedulerStandIn],
) -> None:
    _, scheduler = running
    [register] = await scheduler.wait_for(NodeRegister)
    assert (register.kind, register.backend, register.gpus) == ("gpu", "torch", (0, 1, 2, 3))
    assert register.gpu_memory_mb == 1 and register.nvlink_groups == ((0, 1, 2, 3),)
    assert register.services["rm"]["sizes"] == [1, 2, 4]
    assert register.services["rm"]["device_mb"][0] > 0
    assert "OSError" in register.services["broken"]["error"]


async def test_cold_then_warm_requests_report_timings_and_cache_events(
    running: tuple[GpuAgent, SchedulerStandIn],
) -> None:
    _, scheduler = running
    await scheduler.send(NODE, gpu_dispatch("cold", "rm", (0,)))
    cold = (await scheduler.results(1))["cold"]
    await scheduler.send(NODE, gpu_dispatch("warm", "rm", (0,), priority=5))
    warm = (await scheduler.results(2))["warm"]
    assert cold.status == warm.status == "succeeded"
    assert len(json.loads(cold.output)["scores"]) == 2
    assert json.loads(warm.output) == json.loads(cold.output)
    assert set(cold.timings) == {"queue_s", "restore_s", "execute_s"}
    assert [e["kind"] for e in cold.cache_events] == ["restore"]
    assert warm.cache_events == () and warm.gpus == (0,)
    beats = await scheduler.wait_for(Heartbeat, 2)
    assert any(beat.cache and beat.cache[0]["service"] == "rm" for beat in beats)


async def test_a_teacher_evicts_the_reward_model_when_memory_is_short(
    running: tuple[GpuAgent, SchedulerStandIn],
) -> None:
    _, scheduler = running
    await scheduler.send(NODE, gpu_dispatch("rm", "rm", (2,)))
    await scheduler.results(1)
    await scheduler.send(NODE, gpu_dispatch("teacher", "teacher", (2, 3)))
    teacher = (await scheduler.results(2))["teacher"]
    assert [(e["kind"], e["service"]) for e in teacher.cache_events] == [
        ("evict", "rm"),
        ("restore", "teacher"),
    ]
    assert [len(lp) for lp in json.loads(teacher.output)["logprobs"]] == [3, 2]


@pytest.mark.parametrize(
    ("dispatch", "reason", "says"),
    [
        (gpu_dispatch("bad", "rm", (0,), request={"input_ids": "x"}), "bad_request", "input_ids"),
        (gpu_dispatch("broken", "broken", (0,)), "load_failed", "did not load"),
        (gpu_dispatch("elsewhere", "rm", (4,)), "infra_error", "not on this node"),
        (gpu_dispatch("unknown", "nope", (0,)), "infra_error", "not hosted here"),
    ],
)
async def test_faults_end_failed_with_a_reason(
    running: tuple[GpuAgent, SchedulerStandIn], dispatch: Dispatch, reason: str, says: str
) -> None:
    _, scheduler = running
    await scheduler.send(NODE, dispatch)
    result = (await scheduler.results(1))[dispatch.action_id]
    assert (result.status, result.reason) == ("failed", reason)
    assert says in result.output


async def test_the_agent_process_serves_over_redis(
    redis_transport: RedisStreamsTransport, names: StreamNames, tmp_path: Path
) -> None:
    scheduler = SchedulerStandIn(redis_transport, names, POOL)
    await scheduler.start()
    node = f"{NODE}-proc"
    process = subprocess.Popen(
        [
            sys.executable, "-m", "workers.agents.gpu", "--redis-url", REDIS_URL,
            "--pool", POOL, "--node-id", node, "--stream-prefix", names.prefix,
            "--devices", "2", "--device-memory-mb", "64", "--log-level", "WARNING",
            "--make-checkpoint", f"reward:{tmp_path / 'rm'}",
            "--service", f"rm=torch:reward:{tmp_path / 'rm'}",
        ],
        cwd=REPO_ROOT,
    )  # fmt: skip
    try:
        [register] = await scheduler.wait_for(NodeRegister, timeout_s=120)
        assert register.gpus == (0, 1) and register.services["rm"]["sizes"] == [1, 2]
        await scheduler.send(node, gpu_dispatch("proc", "rm", (0, 1)))
        result = (await scheduler.results(1, timeout_s=60))["proc"]
        assert result.status == "succeeded", result.output
        assert len(json.loads(result.output)["scores"]) == 2
    finally:
        process.send_signal(signal.SIGTERM)
        await asyncio.to_thread(process.wait, 30)
    assert process.returncode == 0


def test_a_single_sequence_reward_is_the_actions_score() -> None:
    from workers.agents.gpu.agent import single_score

    assert single_score({"scores": [0.25]}) == 0.25
    assert single_score({"scores": [0.25, 0.5]}) is None  # a batch: read in order from output
    assert single_score({"logprobs": [[-1.0]]}) is None
    assert single_score("text") is None
