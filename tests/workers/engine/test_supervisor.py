"""Loom's engine supervisor against a real engine process (the emulated engine), and SGLang's
command line; SGLang itself only where a GPU and the package are present."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import signal
import socket
import sys
from collections.abc import Callable

import pytest

from workers.engine.supervisor import (
    EngineStartFailed,
    EngineSupervisor,
    SupervisorPolicy,
    sglang_command,
)
from workers.router.upstream import Upstream

pytestmark = pytest.mark.usefixtures("starts_processes")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def emulated(port: int) -> list[str]:
    return [sys.executable, "-m", "workers.engine", "--port", str(port), "--model-name", "tiny"]


FAST = SupervisorPolicy(
    health_timeout_s=30.0, health_interval_s=0.05, backoff_s=0.05, backoff_max_s=0.2,
    stable_s=60.0, max_restarts=3, drain_timeout_s=20.0, stop_timeout_s=5.0,
)  # fmt: skip


async def eventually(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


def test_sglang_command_has_the_flags_the_router_needs() -> None:
    argv = sglang_command("/models/m", port=30000, tp=2, preemption_threshold=10)
    assert argv[1:3] == ["-m", "sglang.launch_server"]
    assert "--enable-priority-scheduling" in argv and "--enable-metrics" in argv
    assert argv[argv.index("--schedule-policy") + 1] == "fcfs"
    assert argv[argv.index("--tp-size") + 1] == "2"
    assert argv[argv.index("--priority-scheduling-preemption-threshold") + 1] == "10"
    with pytest.raises(ValueError, match="schedule_policy"):
        sglang_command("/m", port=1, schedule_policy="lpm")  # not allowed with priorities
    with pytest.raises(ValueError, match="tp"):
        sglang_command("/m", port=1, tp=0)


async def test_a_crashed_engine_is_restarted_and_a_drain_stops_it() -> None:
    port = free_port()
    supervisor = EngineSupervisor(emulated(port), f"http://127.0.0.1:{port}", FAST)
    supervisor.supervise()
    try:
        await eventually(lambda: supervisor.starts == 1 and supervisor.process is not None, "up")
        assert await eventually_healthy(supervisor)
        first = supervisor.process
        assert first is not None
        os.kill(first.pid, signal.SIGKILL)  # a crash
        await eventually(lambda: supervisor.starts == 2, "restarted")
        assert await eventually_healthy(supervisor)
        assert supervisor.last_exit == -signal.SIGKILL and supervisor.restarts == 1
        assert await supervisor.drain() is True  # nothing in flight: idle at once
        assert supervisor.process is not None and supervisor.process.poll() is not None
    finally:
        await supervisor.stop()


async def eventually_healthy(supervisor: EngineSupervisor) -> bool:
    for _ in range(600):
        if await supervisor.healthy():
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_drain_waits_for_the_request_the_engine_holds() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    supervisor = EngineSupervisor(emulated(port), url, FAST)
    await supervisor.start()
    client = Upstream(url)
    try:
        body = b'{"model":"tiny","prompt":"a","max_tokens":40,"stream":true}'
        response = await client.request(
            "POST", "/v1/completions", body, ((b"content-type", b"application/json"),)
        )
        drained = asyncio.create_task(supervisor.drain())
        await asyncio.sleep(0.2)
        assert not drained.done()  # the stream still decodes
        text = await response.read()
        assert text.endswith(b"data: [DONE]\n\n")  # it finished whole
        assert await drained is True
        assert supervisor.process is not None and supervisor.process.poll() is not None
    finally:
        await client.close()
        await supervisor.stop()


async def test_an_engine_that_cannot_start_is_given_up_after_its_restarts() -> None:
    port = free_port()
    argv = [sys.executable, "-c", "raise SystemExit(3)"]
    supervisor = EngineSupervisor(argv, f"http://127.0.0.1:{port}", FAST)
    with pytest.raises(EngineStartFailed, match="exited with 3"):
        await supervisor.start()
    await supervisor.run()  # retries with backoff, then gives up
    assert supervisor.starts == 1 + FAST.max_restarts + 1 and supervisor.stopped
    await supervisor.stop()


def _sglang_missing() -> str | None:
    if importlib.util.find_spec("sglang") is None:
        return "sglang is not installed (requirements/gpu.txt, GPU nodes only)"
    if shutil.which("nvidia-smi") is None:
        return "no NVIDIA GPU on this machine"
    return None


@pytest.mark.skipif(_sglang_missing() is not None, reason=str(_sglang_missing()))
async def test_sglang_is_started_supervised_and_drained() -> None:  # pragma: no cover
    model = os.environ.get("LOOM_SGLANG_TEST_MODEL")
    if not model:
        pytest.skip("LOOM_SGLANG_TEST_MODEL (a local HF model directory) is not set")
    port = free_port()
    policy = SupervisorPolicy(health_timeout_s=600.0, stop_timeout_s=60.0)
    supervisor = EngineSupervisor(
        sglang_command(model, port=port), f"http://127.0.0.1:{port}", policy
    )
    await supervisor.start()
    try:
        assert await supervisor.idle()
        assert await supervisor.drain() is True
    finally:
        await supervisor.stop()
