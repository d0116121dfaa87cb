"""The engine's HTTP surface: OpenAI and SGLang shapes, SSE, abort, bad input, metrics."""

from __future__ import annotations

import asyncio
import json

import httpx

from workers.engine.core import EmulatedEngine
from workers.engine.openai_api import filler_text


async def test_chat_completion_returns_max_tokens_of_filler(client: httpx.AsyncClient) -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "a b c"}], "max_tokens": 7}
    response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    answer = response.json()
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"]["content"] == filler_text(0, 7)
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["usage"] == {"prompt_tokens": 7, "completion_tokens": 7, "total_tokens": 14}


async def _events(response: httpx.Response) -> list[str]:
    return [line[6:] async for line in response.aiter_lines() if line.startswith("data: ")]


async def test_streamed_completion_sends_every_token_then_usage_and_done(
    client: httpx.AsyncClient,
) -> None:
    body = {
        "prompt": "x y",
        "max_tokens": 9,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with client.stream("POST", "/v1/completions", json=body) as response:
        assert response.headers["content-type"] == "text/event-stream"
        events = await _events(response)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    assert text == filler_text(0, 9)
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"]["completion_tokens"] == 9


async def test_generate_takes_rid_and_priority(client: httpx.AsyncClient) -> None:
    body = {"text": "a", "sampling_params": {"max_new_tokens": 3}, "rid": "r-1", "priority": 4}
    answer = (await client.post("/generate", json=body)).json()
    assert answer["meta_info"]["id"] == "r-1"
    assert answer["meta_info"]["finish_reason"] == {"type": "length", "length": 3}


async def test_abort_request_ends_a_stream_with_finish_reason_abort(
    client: httpx.AsyncClient, engine: EmulatedEngine
) -> None:
    body = {"prompt": "x", "max_tokens": 1_000_000, "stream": True, "rid": "victim"}
    async with client.stream("POST", "/v1/completions", json=body) as response:
        lines = response.aiter_lines()
        async for line in lines:
            if line.startswith("data: "):
                break
        aborted = await client.post("/abort_request", json={"rid": "victim"})
        assert aborted.json() == {"success": True, "aborted": 1}
        rest = [line async for line in lines if line.startswith("data: ")]
    assert rest[-1] == "data: [DONE]"
    assert json.loads(rest[-2][6:])["choices"][0]["finish_reason"] == "abort"
    assert engine.num_running == 0


async def test_a_client_that_abandons_its_stream_aborts_the_request(
    client: httpx.AsyncClient, engine: EmulatedEngine
) -> None:
    body = {"prompt": "x", "max_tokens": 1_000_000, "stream": True}
    async with client.stream("POST", "/v1/completions", json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                break
    for _ in range(2000):  # the server notices the closed connection within a few loop turns
        if engine.stats.requests_aborted == 1:
            break
        await asyncio.sleep(0.005)
    assert engine.stats.requests_aborted == 1 and engine.num_running == 0


ONE = [{"role": "user", "content": "x"}]
dumps = json.dumps


async def test_bad_bodies_name_the_field(client: httpx.AsyncClient) -> None:
    cases: list[tuple[str, str, str]] = [
        ("/v1/chat/completions", "{not json", "body"),
        ("/v1/chat/completions", dumps({"messages": []}), "messages"),
        ("/v1/chat/completions", dumps({"messages": ONE, "max_tokens": "5"}), "max_tokens"),
        ("/v1/completions", dumps({"prompt": "x", "stream": "yes"}), "stream"),
        ("/v1/completions", dumps({"max_tokens": 3}), "prompt"),
        ("/v1/completions", dumps({"prompt": "x", "n": 2}), "n"),
    ]  # fmt: skip
    for path, raw, field in cases:
        response = await client.post(path, content=raw)
        assert response.status_code == 400, (path, raw)
        assert response.json()["error"]["param"] == field


async def test_unknown_model_is_404(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/completions", json={"prompt": "x", "model": "other"})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"


async def test_models_health_and_sglang_metrics(client: httpx.AsyncClient) -> None:
    assert (await client.get("/health")).status_code == 200
    models = (await client.get("/v1/models")).json()
    assert [m["id"] for m in models["data"]] == ["tiny"]
    await client.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})
    metrics = (await client.get("/metrics")).text
    for name in ("num_running_reqs", "num_queue_reqs", "token_usage", "gen_throughput"):
        assert f"sglang:{name}" in metrics
    assert 'sglang:generation_tokens_total{model_name="tiny"} 2.0' in metrics
