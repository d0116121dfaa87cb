"""The router in front of the CPU engine: a trainer's generation through Loom, for real
(llama.cpp decoding the project's own model), with the official ``openai`` client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.workers.router.conftest import KEY, MODEL, Stack, start_stack, stop_stack
from workers.engine.llamacpp import LlamaCppConfig, LlamaCppEngine
from workers.engine.tiny_model import TinyModelShape, tiny_model

pytestmark = pytest.mark.redis

SMALL = TinyModelShape(embedding=64, layers=2, heads=2, feed_forward=128, context=1024)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model(tmp_path_factory.mktemp("models"), SMALL)


@pytest.fixture
async def cpu_stack(redis_url: str, model_path: Path) -> AsyncIterator[Stack]:
    def engine() -> LlamaCppEngine:
        return LlamaCppEngine(model_path, LlamaCppConfig(slots=2, context=1024))

    started = await start_stack(redis_url, engines=2, engine_factory=engine)
    yield started
    await stop_stack(started)


async def test_a_trajectory_generates_real_tokens_through_the_router(cpu_stack: Stack) -> None:
    client = openai.AsyncOpenAI(base_url=f"{cpu_stack.url}/v1", api_key=KEY, max_retries=0)
    trajectory = await cpu_stack.trajectory("t-cpu")
    messages: Any = [{"role": "user", "content": "fix the failing test"}]
    headers = {"X-Loom-Trajectory": trajectory}
    first = await client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=16, seed=5,
        extra_headers=headers, extra_body={"ignore_eos": True},
    )  # fmt: skip
    assert first.usage is not None and first.usage.completion_tokens == 16
    assert first.choices[0].message.content  # text the model decoded
    stream = await client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=16, seed=5, stream=True,
        extra_headers=headers, extra_body={"ignore_eos": True},
    )  # fmt: skip
    streamed = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    state = cpu_stack.app.table.get(trajectory)
    assert state is not None and state.steps == 2 and state.tokens == 32
    # the same worker, the same seed: the same tokens (Heddle keeps a trajectory on its worker)
    assert streamed == first.choices[0].message.content
    engines = [e for e in cpu_stack.engines if e.stats.generation_tokens]
    assert len(engines) == 1 and engines[0].stats.generation_tokens == 32
