"""The CPU engine: a model the project writes itself, decoded by llama.cpp for real."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from workers.engine.app import EngineApp
from workers.engine.asgi import Server, bind
from workers.engine.core import (
    FINISH_ABORT,
    FINISH_LENGTH,
    FINISH_STOP,
    EngineBusy,
    PromptTooLong,
)
from workers.engine.llamacpp import LlamaCppConfig, LlamaCppEngine
from workers.engine.openai_api import render_chat
from workers.engine.tiny_model import TinyModelShape, tiny_model, vocabulary

SMALL = TinyModelShape(embedding=64, layers=2, heads=2, feed_forward=128, context=512)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model(tmp_path_factory.mktemp("models"), SMALL)


@pytest.fixture
async def engine(model_path: Path) -> AsyncIterator[LlamaCppEngine]:
    running = LlamaCppEngine(model_path, LlamaCppConfig(slots=1, context=256))
    running.start()
    yield running
    await running.stop()


async def _finished(request: object) -> None:
    await request.progress(1 << 62)  # type: ignore[attr-defined]


def test_the_model_file_is_the_same_on_every_machine(tmp_path: Path) -> None:
    first = tiny_model(tmp_path / "a", SMALL).read_bytes()
    second = tiny_model(tmp_path / "b", SMALL).read_bytes()
    assert first == second
    tokens, scores, types = vocabulary()
    assert len(tokens) == len(scores) == len(types)
    assert tokens[3:259] == [f"<0x{b:02X}>" for b in range(256)]  # byte fallback


async def test_decodes_real_tokens_up_to_max_tokens(engine: LlamaCppEngine) -> None:
    request = engine.submit(
        "r1", prompt="def test the code", max_tokens=24, seed=1, ignore_eos=True
    )
    await asyncio.wait_for(_finished(request), 60)
    assert request.finish_reason == FINISH_LENGTH
    assert request.generated == 24 == len(request.pieces)
    assert request.text  # real detokenized output
    assert engine.stats.generation_tokens == 24
    assert engine.stats.requests_finished == 1
    assert engine.num_running == 0 and engine.num_queued == 0


async def test_same_seed_same_text(engine: LlamaCppEngine) -> None:
    first = engine.submit("a", prompt="fix the bug", max_tokens=16, seed=7)
    await asyncio.wait_for(_finished(first), 60)
    second = engine.submit("b", prompt="fix the bug", max_tokens=16, seed=7)
    await asyncio.wait_for(_finished(second), 60)
    assert first.text == second.text


async def test_streams_tokens_before_the_end(engine: LlamaCppEngine) -> None:
    request = engine.submit("s", prompt="run", max_tokens=64, ignore_eos=True)
    seen = await asyncio.wait_for(request.progress(0), 60)
    assert seen >= 1
    await asyncio.wait_for(_finished(request), 60)
    assert request.generated == 64


async def test_pending_requests_go_highest_priority_first(engine: LlamaCppEngine) -> None:
    blocker = engine.submit("busy", prompt="a", max_tokens=48, ignore_eos=True)
    await asyncio.wait_for(blocker.progress(0), 60)  # the only slot is taken
    low = engine.submit("low", prompt="a", max_tokens=4, priority=1, ignore_eos=True)
    high = engine.submit("high", prompt="a", max_tokens=4, priority=9, ignore_eos=True)
    assert engine.num_queued == 2
    await asyncio.wait_for(_finished(low), 60)
    await asyncio.wait_for(_finished(high), 60)
    assert high.finished_at is not None and low.finished_at is not None
    assert high.finished_at < low.finished_at


async def test_abort_stops_a_running_and_a_pending_request(engine: LlamaCppEngine) -> None:
    running = engine.submit("run", prompt="a", max_tokens=200, ignore_eos=True)
    await asyncio.wait_for(running.progress(0), 60)
    pending = engine.submit("wait", prompt="a", max_tokens=8)
    assert engine.abort("wait") and engine.abort("run")
    assert not engine.abort("unknown")  # a no-op, as in SGLang
    assert running.finish_reason == pending.finish_reason == FINISH_ABORT
    assert pending.generated == 0
    assert running.generated < 200
    # the slot is free again
    after = engine.submit("after", prompt="a", max_tokens=4, ignore_eos=True)
    await asyncio.wait_for(_finished(after), 60)
    assert after.finish_reason == FINISH_LENGTH
    assert engine.stats.requests_aborted == 2


async def test_bad_requests_name_their_field(engine: LlamaCppEngine) -> None:
    engine.submit("dup", prompt="a", max_tokens=64, ignore_eos=True)
    with pytest.raises(EngineBusy):
        engine.submit("dup", prompt="a", max_tokens=4)
    with pytest.raises(PromptTooLong) as too_long:
        engine.submit("long", prompt="a", max_tokens=1000)
    assert too_long.value.field == "max_tokens"
    with pytest.raises(PromptTooLong) as no_room:
        engine.submit("huge", prompt=list(range(3, 259)) * 2, max_tokens=1)
    assert no_room.value.field is None  # the endpoint's prompt field is to blame


async def test_the_end_of_sequence_token_ends_a_request_unless_ignored(
    engine: LlamaCppEngine,
) -> None:
    """Random weights emit ``</s>`` now and then: with it honoured, some of many requests stop
    early (``stop``); with ``ignore_eos`` every one runs to its length."""
    honoured = [engine.submit(f"e{i}", prompt="a", max_tokens=120, seed=i) for i in range(8)]
    ignored = [
        engine.submit(f"i{i}", prompt="a", max_tokens=120, seed=i, ignore_eos=True)
        for i in range(8)
    ]
    for request in honoured + ignored:
        await asyncio.wait_for(_finished(request), 60)
    assert all(r.generated == 120 for r in ignored)
    assert all(r.finish_reason in (FINISH_STOP, FINISH_LENGTH) for r in honoured)
    stopped = [r for r in honoured if r.finish_reason == FINISH_STOP]
    assert all(r.generated < 120 for r in stopped)


# --- over HTTP: the same app as the emulated engine, the official openai client -------------


@pytest.fixture
async def served(engine: LlamaCppEngine) -> AsyncIterator[str]:
    server = Server(EngineApp(engine, "tiny"), bind())
    await server.start()
    yield server.url
    await server.stop()


async def test_openai_client_gets_real_text_streamed_and_whole(
    served: str, engine: LlamaCppEngine
) -> None:
    client = openai.AsyncOpenAI(base_url=f"{served}/v1", api_key="unused", max_retries=0)
    messages: Any = [{"role": "user", "content": "write a test"}]
    whole = await client.chat.completions.create(
        model="tiny", messages=messages, max_tokens=12, seed=3, extra_body={"ignore_eos": True}
    )
    text = whole.choices[0].message.content
    assert whole.usage is not None and whole.usage.completion_tokens == 12
    prompt = render_chat(messages)
    assert whole.usage.prompt_tokens == len(engine.tokenize(prompt))  # the engine's tokenizer
    stream = await client.chat.completions.create(
        model="tiny", messages=messages, max_tokens=12, seed=3, stream=True,
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    pieces = [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
    assert "".join(pieces) == text  # same seed, same tokens, streamed as decoded
    completion = await client.completions.create(
        model="tiny", prompt="def f():", max_tokens=5, extra_body={"ignore_eos": True}
    )
    assert completion.usage is not None and completion.usage.completion_tokens == 5


async def test_bad_http_requests_are_400s_naming_the_field(served: str) -> None:
    async with httpx.AsyncClient(base_url=served, timeout=30) as http:
        too_long = await http.post(
            "/v1/completions", json={"model": "tiny", "prompt": "a", "max_tokens": 100_000}
        )
        assert too_long.status_code == 400
        assert too_long.json()["error"]["param"] == "max_tokens"
        hot = await http.post(
            "/v1/completions", json={"model": "tiny", "prompt": "a", "temperature": 9}
        )
        assert hot.status_code == 400 and hot.json()["error"]["param"] == "temperature"
        seed = await http.post("/v1/completions", json={"prompt": "a", "seed": -1})
        assert seed.status_code == 400 and seed.json()["error"]["param"] == "seed"
