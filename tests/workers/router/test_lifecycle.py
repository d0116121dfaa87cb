"""Aborts, abandoned streams, dead and drained workers: nothing hangs, nothing leaks."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import openai
import pytest

from tests.workers.router.conftest import KEY, MODEL, Stack
from workers.engine.asgi import Server, bind
from workers.engine.core import EmulatedEngine
from workers.router.app import RouterApp
from workers.router.policies import make_policy
from workers.router.pool import WorkerPool

pytestmark = pytest.mark.redis

HEADERS = {"Authorization": f"Bearer {KEY}"}


async def eventually(condition: Callable[[], bool], what: str) -> None:
    """Wait for a condition the servers reach within a few loop turns (generous bound)."""
    for _ in range(4000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never happened: {what}")


async def first_event(lines: AsyncIterator[str]) -> str:
    async for line in lines:
        if line.startswith("data: "):
            return line
    raise AssertionError("the stream ended before its first event")


def long_stream(trajectory: str, **extra: object) -> dict[str, object]:
    body: dict[str, object] = {"model": MODEL, "prompt": "x", "max_tokens": 10**6, "stream": True}
    return {**body, "loom_trajectory": trajectory, **extra}


async def test_a_client_that_abandons_its_stream_aborts_it_on_the_worker(stack: Stack) -> None:
    await stack.trajectory("t-leave")
    async with (
        httpx.AsyncClient(base_url=stack.url, timeout=30) as http,
        http.stream(
            "POST", "/v1/completions", json=long_stream("t-leave"), headers=HEADERS
        ) as response,
    ):
        await first_event(response.aiter_lines())
    await eventually(
        lambda: sum(e.stats.requests_aborted for e in stack.engines) == 1, "engine abort"
    )
    await eventually(lambda: not stack.pool.requests, "router forgets the request")
    assert all(e.num_running == 0 and e.num_queued == 0 for e in stack.engines)


async def test_abort_one_request_by_rid(stack: Stack) -> None:
    await stack.trajectory("t-rid")
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as http:
        body = long_stream("t-rid", rid="my-rid-1")
        async with http.stream("POST", "/v1/completions", json=body, headers=HEADERS) as response:
            lines = response.aiter_lines()
            await first_event(lines)
            aborted = await http.post("/v1/loom/requests/my-rid-1/abort", headers=HEADERS)
            assert aborted.status_code == 200
            events = [line[6:] async for line in lines if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["choices"][0]["finish_reason"] == "abort"
    assert not stack.pool.requests


async def test_abort_a_whole_trajectory_fans_out_to_its_requests(stack: Stack) -> None:
    await stack.trajectory("t-all")
    client = openai.AsyncOpenAI(base_url=f"{stack.url}/v1", api_key=KEY, max_retries=0)

    async def one() -> str | None:
        stream = await client.completions.create(
            model=MODEL, prompt="x", max_tokens=10**6, stream=True,
            extra_headers={"X-Loom-Trajectory": "t-all"},
        )  # fmt: skip
        reason = None
        async for chunk in stream:
            reason = chunk.choices[0].finish_reason or reason
        return reason

    streams = [asyncio.create_task(one()) for _ in range(3)]
    await eventually(lambda: len(stack.pool.requests) == 3, "three requests in flight")
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as http:
        answer = await http.post("/v1/loom/trajectories/t-all/abort", headers=HEADERS)
    assert answer.json() == {"trajectory": "t-all", "status": "aborted", "aborted_requests": 3}
    assert await asyncio.gather(*streams) == ["abort"] * 3
    assert stack.app.table.get("t-all") is None
    await stack.publisher.flush()
    entries: Any = await stack.registry.client.xrange(stack.names.trajectory_state)
    states = [json.loads(fields[b"state"]) for _, fields in entries]
    states = [s for s in states if s["event"] != "workers"]  # the workers' load entries
    ended = next(i for i, s in enumerate(states) if s["event"] == "ended")
    # the aborted steps report after the end; every later state still says aborted
    assert {s["status"] for s in states[ended:]} == {"aborted"}


async def test_a_drained_worker_gets_no_new_requests(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as http:
        refused = await http.post("/v1/loom/workers/w0/drain", headers=HEADERS)
        assert refused.status_code == 403
        admin = {"Authorization": "Bearer admin-secret"}
        drained = await http.post("/v1/loom/workers/w0/drain", headers=admin)
        assert drained.json()["draining"] is True
        for i in range(4):
            await stack.trajectory(f"t-d{i}")
            body = {"model": MODEL, "prompt": "x", "max_tokens": 2, "loom_trajectory": f"t-d{i}"}
            assert (await http.post("/v1/completions", json=body, headers=HEADERS)).is_success
    assert stack.pool.by_name["w0"].requests_total == 0
    assert stack.pool.by_name["w1"].requests_total == 4


@pytest.fixture
async def engine_process(
    starts_processes: None,
) -> AsyncIterator[tuple[subprocess.Popen[str], str]]:
    """An emulated engine as a real process (so it can be stopped and killed)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "workers.engine", "--port", "0", "--model-name", MODEL],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    line = await asyncio.to_thread(process.stdout.readline)
    url = line.rsplit(" ", 1)[-1].strip()
    assert url.startswith("http://"), line
    yield process, url
    if process.poll() is None:
        process.send_signal(signal.SIGCONT)
        process.kill()
    process.wait()


@pytest.mark.parametrize("how", ["killed", "hung"])
async def test_a_worker_lost_mid_stream_ends_it_with_a_retryable_error(
    stack: Stack, engine_process: tuple[subprocess.Popen[str], str], how: str
) -> None:
    process, url = engine_process
    pool = WorkerPool([url], health_interval_s=0.05, health_timeout_s=0.3)
    await pool.start()
    app = RouterApp(pool, make_policy("heddle"), registry=stack.registry, models=(MODEL,))
    router = Server(app, bind())
    await router.start()
    await stack.trajectory("t-lost")
    try:
        async with (
            httpx.AsyncClient(base_url=router.url, timeout=60) as http,
            http.stream(
                "POST", "/v1/completions", json=long_stream("t-lost"), headers=HEADERS
            ) as response,
        ):
            lines = response.aiter_lines()
            await first_event(lines)
            process.send_signal(signal.SIGKILL if how == "killed" else signal.SIGSTOP)
            events = [line[6:] async for line in lines if line.startswith("data: ")]
        error = json.loads(events[-1])["error"]
        assert error["code"] == "worker_lost" and error["retryable"] is True
        await eventually(lambda: not pool.workers[0].healthy, "worker declared dead")
        async with httpx.AsyncClient(base_url=router.url, timeout=60) as http:
            body = {"model": MODEL, "prompt": "x", "max_tokens": 2, "loom_trajectory": "t-lost"}
            refused = await http.post("/v1/completions", json=body, headers=HEADERS)
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["retryable"] is True
        assert not pool.requests
    finally:
        await router.stop()
        await pool.close()


async def test_a_worker_down_before_answering_is_skipped_and_the_request_rerouted(
    stack: Stack,
) -> None:
    await stack.engine_servers[0].stop()  # nothing listens on w0's port any more
    await stack.trajectory("t-reroute")
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as http:
        for _ in range(3):
            body = {"model": MODEL, "prompt": "x", "max_tokens": 2, "loom_trajectory": "t-reroute"}
            answer = await http.post("/v1/completions", json=body, headers=HEADERS)
            assert answer.status_code == 200
    assert not stack.pool.by_name["w0"].healthy
    assert stack.engines[1].stats.requests_finished == 3


async def test_pps_priority_reaches_the_engine(stack: Stack) -> None:
    await stack.trajectory("t-prio")
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as http:
        body = long_stream("t-prio", rid="prio-1")
        async with http.stream("POST", "/v1/completions", json=body, headers=HEADERS) as response:
            await first_event(response.aiter_lines())
            state = stack.app.table.get("t-prio")
            assert state is not None
            emulated = [e for e in stack.engines if isinstance(e, EmulatedEngine)]
            on_engine = [e._requests["prio-1"] for e in emulated if "prio-1" in e._requests]
            assert [r.priority for r in on_engine] == [round(state.predicted_total)]
            await http.post("/v1/loom/requests/prio-1/abort", headers=HEADERS)
