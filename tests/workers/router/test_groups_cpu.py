"""A group rollout through the router on the real CPU engine (llama.cpp decoding the project's
own model): real text, aborts on a real engine, and the seed pairing the bench relies on."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.workers.router.conftest import KEY, MODEL, Stack, start_stack, stop_stack
from tests.workers.router.test_lifecycle import eventually
from workers.engine.llamacpp import LlamaCppConfig, LlamaCppEngine
from workers.engine.tiny_model import TinyModelShape, tiny_model

pytestmark = pytest.mark.redis

SMALL = TinyModelShape(embedding=64, layers=2, heads=2, feed_forward=128, context=1024)
HEADERS = {"Authorization": f"Bearer {KEY}"}


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


async def group(stack: Stack, policy: dict[str, Any], max_tokens: int = 96) -> list[dict[str, Any]]:
    body = {
        "model": MODEL, "prompts": ["fix the failing test", "write a parser"], "group_size": 2,
        "budget": policy, "sampling": {"max_tokens": max_tokens, "seed": 11}, "stream": True,
    }  # fmt: skip
    async with (
        httpx.AsyncClient(base_url=stack.url, timeout=120) as http,
        http.stream("POST", "/v1/loom/groups", json=body, headers=HEADERS) as response,
    ):
        assert response.status_code == 200
        lines = [line[6:] async for line in response.aiter_lines() if line.startswith("data: {")]
    return [json.loads(line) for line in lines]


def finished(events: list[dict[str, Any]]) -> dict[tuple[int, int], int]:
    """(prompt, sample) → tokens of every candidate that finished (kept or not selected)."""
    rows = events[-1]["statistics"]["samples"]
    return {
        (prompt, s["sample"]): s["tokens"]
        for prompt, row in enumerate(rows)
        for s in row
        if s["fate"] in ("kept", "dropped")
    }


async def test_a_group_on_the_cpu_engine_extends_standard_sampling(cpu_stack: Stack) -> None:
    standard = await group(cpu_stack, {"policy": "standard"})
    dual_end = await group(cpu_stack, {"policy": "fixed", "total": 6})  # 3 each: whole pools
    assert standard[-1]["type"] == dual_end[-1]["type"] == "group.complete"
    kept = {(e["prompt"], e["sample"]): e for e in standard if e["type"] == "sample.kept"}
    assert len(kept) == 4 and all(e["text"] for e in kept.values())
    # the same seed draws the same candidates: standard's samples are the pool's first M
    pool = finished(dual_end)
    assert {key: e["tokens"] for key, e in kept.items()} == {key: pool[key] for key in kept}
    pool_texts = {
        (e["prompt"], e["sample"]): e["text"] for e in dual_end if e["type"] == "sample.kept"
    }
    for key in kept.keys() & pool_texts.keys():
        assert pool_texts[key] == kept[key]["text"]


async def test_early_stop_aborts_on_the_cpu_engine(cpu_stack: Stack) -> None:
    # 2M candidates each: shortest-only; long enough for most to end at their EOS (valid)
    pruned = await group(cpu_stack, {"policy": "fixed", "total": 8}, max_tokens=600)
    statistics = pruned[-1]["statistics"]
    assert statistics["pruned_prompts"] == [0, 1] and statistics["kept"] == 4
    aborted = statistics["aborted"]
    assert aborted >= 1 and aborted + statistics["dropped"] + statistics["kept"] == 8
    engines = cpu_stack.engines
    await eventually(  # the aborts reach the engines as the group ends
        lambda: all(e.num_running == 0 and e.num_queued == 0 for e in engines),
        "the aborted candidates stopped on their engines",
    )
    # a candidate may finish while its abort is on the way: the engine then counts it finished
    assert 1 <= sum(e.stats.requests_aborted for e in engines) <= aborted
