"""The official ``openai`` client, unchanged, through the router to emulated engines."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.workers.router.conftest import KEY, MODEL, Stack
from workers.engine.openai_api import filler_text

pytestmark = pytest.mark.redis


def client_for(stack: Stack, key: str = KEY) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{stack.url}/v1", api_key=key, max_retries=0)


async def test_models_lists_what_the_workers_serve(stack: Stack) -> None:
    models = await client_for(stack).models.list()
    assert [m.id for m in models.data] == [MODEL]


async def test_chat_completion_non_streaming(stack: Stack) -> None:
    trajectory = await stack.trajectory("t-chat")
    answer = await client_for(stack).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "write a function"}],
        max_tokens=6,
        extra_headers={"X-Loom-Trajectory": trajectory},
    )
    assert answer.choices[0].message.content == filler_text(0, 6)
    assert answer.usage is not None and answer.usage.completion_tokens == 6
    state = stack.app.table.get(trajectory)
    assert state is not None and state.steps == 1 and state.tokens == 6


async def test_chat_completion_streaming_with_the_trajectory_in_the_body(stack: Stack) -> None:
    trajectory = await stack.trajectory("t-stream")
    stream = await client_for(stack).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "go"}],
        max_tokens=12,
        stream=True,
        extra_body={"loom_trajectory": trajectory},
    )
    chunks = [chunk async for chunk in stream]
    assert all(chunk.choices for chunk in chunks)  # the router's own usage event is stripped
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == filler_text(0, 12)
    assert chunks[-1].choices[0].finish_reason == "length"
    state = stack.app.table.get(trajectory)
    assert state is not None and state.tokens == 12  # counted from the worker's usage event


async def test_completions_streaming_keeps_usage_the_client_asked_for(stack: Stack) -> None:
    trajectory = await stack.trajectory("t-usage")
    stream = await client_for(stack).completions.create(
        model=MODEL,
        prompt="def f(x):",
        max_tokens=4,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"X-Loom-Trajectory": trajectory},
    )
    chunks = [chunk async for chunk in stream]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4
    assert "".join(c.choices[0].text for c in chunks if c.choices) == filler_text(0, 4)


async def test_steps_accumulate_and_state_is_published(stack: Stack) -> None:
    trajectory = await stack.trajectory("t-steps")
    client = client_for(stack)
    for _ in range(3):
        await client.completions.create(
            model=MODEL, prompt="x", max_tokens=5, extra_headers={"X-Loom-Trajectory": trajectory}
        )
    state = stack.app.table.get(trajectory)
    assert state is not None and state.steps == 3 and state.tokens == 15
    assert state.worker is not None and state.priority == round(state.predicted_total)
    await stack.publisher.flush()
    entries: Any = await stack.registry.client.xrange(stack.names.trajectory_state)
    states = [json.loads(fields[b"state"]) for _, fields in entries]
    finished = [
        s for s in states if s.get("trajectory") == trajectory and s["event"] == "step_finished"
    ]
    assert [s["steps"] for s in finished] == [1, 2, 3]
    assert finished[-1]["tokens"] == 15 and finished[-1]["job"] == "7"
