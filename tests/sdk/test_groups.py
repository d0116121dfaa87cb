"""The SDK's group rollouts (darts §4) end to end: the embedded router over the real CPU engine
(llama.cpp decoding the project's own model), keys from the database."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from loom import AsyncClient, Client, GroupSample, GroupTokens, LoomError

from apps.embedded.llm import EmbeddedLlm
from controlplane.wsgi import application

pytestmark = pytest.mark.django_db(transaction=True)

PROMPTS: list[str | dict[str, Any]] = [
    "fix the failing test",
    {"id": "parser", "messages": [{"role": "user", "content": "a"}]},
]


@pytest.fixture
async def llm(settings: Any, tmp_path: Path) -> AsyncIterator[EmbeddedLlm]:
    settings.VAR_DIR = str(tmp_path)  # the tiny model is written here
    started = EmbeddedLlm(port=0, slots=2)
    await started.start()
    yield started
    await started.stop()


def sync_client(job_actor: Any, llm: EmbeddedLlm) -> Client:
    transport = httpx.WSGITransport(app=application)
    return Client("http://testserver", job_actor.raw_key, transport=transport, llm_url=llm.url)


async def test_a_group_streams_m_kept_samples_per_prompt(job_actor: Any, llm: EmbeddedLlm) -> None:
    client = sync_client(job_actor, llm)

    def rollout() -> tuple[list[GroupSample], dict[str, Any] | None]:
        stream = client.group_rollout(
            PROMPTS, model=llm.model_name, group_size=2, budget={"policy": "fixed", "total": 6},
            max_tokens=12, seed=4,
        )  # fmt: skip
        return list(stream), stream.statistics

    try:
        samples, statistics = await asyncio.to_thread(rollout)
    finally:
        client.close()
    assert statistics is not None and statistics["total_budget"] == 6
    assert sorted(s.prompt for s in samples) == [0, 0, 1, 1]
    assert {s.prompt_id for s in samples if s.prompt == 1} == {"parser"}
    assert all(0 < s.tokens <= 12 and s.text for s in samples)
    assert statistics["kept"] == 4 and statistics["kept_tokens"] == sum(s.tokens for s in samples)
    assert llm.engine is not None and llm.engine.num_running == 0


async def test_the_async_client_standard_sampling_and_token_chunks(
    job_actor: Any, llm: EmbeddedLlm
) -> None:
    pieces: list[GroupTokens] = []
    async with AsyncClient("http://unused", job_actor.raw_key, llm_url=llm.url) as client:
        stream = client.group_rollout(
            ["write a parser"], model=llm.model_name, group_size=3, budget="standard",
            max_tokens=8, ignore_eos=True, token_chunk=2, on_tokens=pieces.append,
        )  # fmt: skip
        samples = [sample async for sample in stream]
    assert len(samples) == 3 and stream.statistics is not None
    # The chunks of a sample are its text's prefix (§4.3.2). A chunk is due every `token_chunk`
    # text events; the engine may merge tokens that end mid-character (random weights make many)
    # into fewer events, so one sample may finish before its first chunk, never all of them.
    prefixes = ["".join(p.text for p in pieces if p.sample == s.sample) for s in samples]
    assert all(s.text.startswith(prefix) for s, prefix in zip(samples, prefixes, strict=True))
    assert any(prefixes), pieces
    assert stream.statistics["allocations"] == [3] and stream.statistics["aborted"] == 0
    assert stream.planned is not None and stream.planned["total_budget"] == 3


async def test_bad_input_and_an_early_exit(job_actor: Any, llm: EmbeddedLlm) -> None:
    async with AsyncClient("http://unused", job_actor.raw_key, llm_url=llm.url) as client:
        with pytest.raises(LoomError, match="group_size"):
            async for _ in client.group_rollout(["a"], model=llm.model_name, group_size=0):
                pass
        stream = client.group_rollout(
            ["a", "b"], model=llm.model_name, group_size=2, budget="standard", max_tokens=400,
            ignore_eos=True,
        )  # fmt: skip
        async for _ in stream:
            break  # leaving closes the stream: the router aborts what still runs
        assert stream.statistics is None
    engine = llm.engine
    assert engine is not None
    for _ in range(2000):
        if engine.num_running == 0 and engine.num_queued == 0:
            break
        await asyncio.sleep(0.01)
    assert engine.num_running == 0 and engine.num_queued == 0
