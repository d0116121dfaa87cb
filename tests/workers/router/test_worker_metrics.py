"""Each worker's own load (running, queued, KV use) read from its /metrics and published."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from tests.workers.router.conftest import Stack
from tests.workers.router.test_lifecycle import HEADERS, eventually
from workers.engine.asgi import Server, bind, send_json
from workers.router.pool import WorkerPool
from workers.router.worker_metrics import engine_metrics, parse_prometheus


def test_sglang_and_llamacpp_names_are_read_and_missing_ones_stay_none() -> None:
    sglang = engine_metrics(
        "# TYPE sglang:num_running_reqs gauge\n"
        'sglang:num_running_reqs{model_name="m"} 3.0\n'
        'sglang:num_queue_reqs{model_name="m"} 5.0\n'
        'sglang:token_usage{model_name="m"} 0.25\n'
    )
    assert (sglang.running_requests, sglang.queued_requests, sglang.kv_usage) == (3, 5, 0.25)
    assert sglang.kv_used_tokens is None and sglang.generation_tokens_per_s is None
    llama = engine_metrics(
        "llamacpp:requests_processing 1\nllamacpp:requests_deferred 4\n"
        "llamacpp:kv_cache_usage_ratio 0.5\nllamacpp:kv_cache_tokens 812\n"
    )
    assert llama.as_dict() == {
        "running_requests": 1,
        "queued_requests": 4,
        "kv_usage": 0.5,
        "kv_used_tokens": 812,
        "generation_tokens_per_s": None,
    }


def test_label_sets_are_summed_and_junk_lines_skipped() -> None:
    samples = parse_prometheus('a{m="x"} 1\na{m="y"} 2.5\nb NaN\nc notanumber\n\nd 7 1700000000\n')
    assert samples == {"a": 3.5, "d": 7.0}


async def test_the_emulated_engines_load_is_read_and_published_on_the_state_stream(
    stack: Stack,
) -> None:
    trajectory = await stack.trajectory("41")
    body = {"model": "tiny", "prompt": "a b c", "max_tokens": 400, "stream": True}
    async with (
        httpx.AsyncClient(base_url=stack.url, timeout=30) as http,
        http.stream(
            "POST",
            "/v1/completions",
            json=body,
            headers={**HEADERS, "X-Loom-Trajectory": trajectory},
        ) as response,
    ):
        assert response.status_code == 200

        def running_seen() -> bool:
            return any(
                w.metrics is not None and w.metrics.running_requests == 1
                for w in stack.pool.workers
            )

        await eventually(running_seen, "a worker reporting the running request")
        busy = next(w for w in stack.pool.workers if w.in_flight)
        assert busy.metrics is not None and busy.metrics.kv_used_tokens
        assert 0 < (busy.metrics.kv_usage or 0) <= 1
        await response.aclose()
    await eventually(lambda: stack.publisher.published > 0, "state published")

    async def workers_entry() -> dict[str, Any] | None:
        entries: Any = await stack.registry.client.xrange(stack.names.trajectory_state)
        for _, fields in reversed(entries):
            state = json.loads(fields[b"state"])
            if state.get("event") == "workers":
                return dict(state)
        return None

    entry = None
    for _ in range(200):
        entry = await workers_entry()
        if entry is not None:
            break
        await asyncio.sleep(0.01)
    assert entry is not None
    assert entry["router"] == "router" and entry["policy"] == "heddle"
    assert [w["name"] for w in entry["workers"]] == ["w0", "w1"]
    reported = entry["workers"][0]["metrics"]
    assert set(reported) >= {"running_requests", "queued_requests", "kv_usage"}
    assert isinstance(entry["workers"][0]["metrics_at"], float)


async def test_an_engine_without_metrics_reports_none() -> None:
    async def no_metrics(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await send_json(send, 404 if scope["path"] == "/metrics" else 200, {})

    server = Server(no_metrics, bind())
    await server.start()
    pool = WorkerPool([server.url])
    try:
        await pool.read_metrics(pool.workers[0])
        assert pool.workers[0].metrics is None
        assert pool.workers[0].describe()["metrics"] is None
    finally:
        await pool.close()
        await server.stop()


async def test_a_health_answer_sent_before_a_death_does_not_revive_the_worker() -> None:
    """A check on its way when the worker is declared dead (a request to it failed) proves
    nothing about it afterwards; the next check, started after the death, decides."""
    answer = asyncio.Event()
    asked = asyncio.Event()

    async def slow_health(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            asked.set()
            await answer.wait()
            await send_json(send, 200, {})

    server = Server(slow_health, bind())
    await server.start()
    pool = WorkerPool([server.url])
    worker = pool.workers[0]
    try:
        check = asyncio.ensure_future(pool.check(worker))
        await asyncio.wait_for(asked.wait(), 5)
        pool.mark_dead(worker, "a request to it failed")
        answer.set()
        assert await check is False
        assert not worker.healthy
        assert await pool.check(worker) is True
        assert worker.healthy
    finally:
        await pool.close()
        await server.stop()
