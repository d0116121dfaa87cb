"""The emulated engine's prefix cache (SGLang's radix cache, in blocks)."""

from __future__ import annotations

import asyncio

import pytest

from workers.engine.core import EmulatedEngine, EngineConfig
from workers.engine.openai_api import filler_text
from workers.engine.prefix_cache import PrefixCache, block_chain

FAST = 0.001
BLOCK = 4


def words(n: int, tag: str = "w") -> list[str]:
    return [f"{tag}{i}" for i in range(n)]


def test_a_block_is_named_by_its_whole_prefix() -> None:
    one = block_chain(words(12), BLOCK)
    other = block_chain(["x", *words(12)[1:]], BLOCK)
    assert len(one) == 3  # only full blocks
    assert all(a != b for a, b in zip(one, other, strict=True))  # differs from the first block on
    assert block_chain(words(13), BLOCK) == one  # a partial last block is not cached


def test_the_longest_cached_prefix_is_found_and_pinned_while_in_use() -> None:
    cache = PrefixCache(BLOCK)
    first = block_chain(words(12), BLOCK)
    cache.release([], 0, first)
    assert cache.cached_tokens == 12 and cache.evictable_tokens == 12
    extended = block_chain(words(20), BLOCK)
    assert cache.acquire(extended, limit_tokens=19) == 12
    assert cache.evictable_tokens == 0
    cache.trim(0)  # nothing in use is evicted
    assert cache.cached_tokens == 12
    cache.release(extended, 12, extended)
    assert cache.cached_tokens == 20 and cache.evictable_tokens == 20


def test_eviction_takes_the_least_recently_used_tail_first() -> None:
    cache = PrefixCache(BLOCK)
    old = block_chain(words(8, "a"), BLOCK)
    new = block_chain(words(8, "b"), BLOCK)
    cache.release([], 0, old)
    cache.release([], 0, new)
    cache.trim(12)  # one block must go: the oldest sequence's tail
    assert cache.acquire(old, 100) == BLOCK
    assert cache.acquire(new, 100) == 2 * BLOCK
    assert cache.evicted_tokens == BLOCK


def test_a_match_never_covers_the_whole_context() -> None:
    cache = PrefixCache(BLOCK)
    chain = block_chain(words(8), BLOCK)
    cache.release([], 0, chain)
    assert cache.acquire(chain, limit_tokens=7) == BLOCK


async def _run(engine: EmulatedEngine, rid: str, tokens: list[str], answer: int) -> int:
    request = engine.submit(rid, prompt_tokens=len(tokens), max_tokens=answer, tokens=tokens)
    await request.progress(1 << 30)
    return request.generated


async def test_a_trajectory_next_step_prefills_only_what_it_added() -> None:
    engine = EmulatedEngine(EngineConfig(time_scale=FAST, prefix_block_tokens=BLOCK))
    engine.start()
    prompt = words(400)
    await _run(engine, "step0", prompt, 40)
    assert engine.stats.cached_prompt_tokens == 0 and engine.stats.prefill_tokens == 400
    # the next step: the whole context so far (prompt, the answer's words, a tool's output)
    following = prompt + filler_text(0, 40).split() + words(30, "tool")
    await _run(engine, "step1", following, 10)
    cached = engine.stats.cached_prompt_tokens
    assert 440 - BLOCK < cached <= 440
    assert engine.stats.prefill_tokens == 400 + len(following) - cached
    await engine.stop()


async def test_without_the_cache_every_step_prefills_its_whole_context() -> None:
    engine = EmulatedEngine(EngineConfig(time_scale=FAST, prefix_cache=False))
    engine.start()
    prompt = words(400)
    await _run(engine, "step0", prompt, 40)
    await _run(engine, "step1", prompt + filler_text(0, 40).split(), 10)
    assert engine.stats.cached_prompt_tokens == 0
    assert engine.stats.prefill_tokens == 400 + 440
    await engine.stop()


async def test_a_preempted_request_resumes_from_its_cached_context() -> None:
    engine = EmulatedEngine(
        EngineConfig(time_scale=FAST, max_batch=1, preemptive=True, prefix_block_tokens=BLOCK)
    )
    engine.start()
    long = engine.submit("long", prompt_tokens=200, max_tokens=400, tokens=words(200))
    await long.progress(100)
    urgent = engine.submit("urgent", prompt_tokens=10, max_tokens=5, priority=5)
    await urgent.progress(1 << 30)
    await long.progress(1 << 30)
    assert long.preemptions == 1 and long.generated == 400
    # on resuming it found its prompt and most of what it had generated in the cache
    assert engine.stats.cached_prompt_tokens >= 200 + 100 - BLOCK
    await engine.stop()


async def test_the_cache_gives_way_to_running_requests() -> None:
    engine = EmulatedEngine(EngineConfig(time_scale=FAST, prefix_block_tokens=BLOCK))
    engine.start()
    share = int(engine.kv_capacity * 0.6)
    await _run(engine, "a", words(share, "a"), 1)
    assert engine.prefix_cache is not None
    assert engine.prefix_cache.cached_tokens >= share - BLOCK
    await _run(engine, "b", words(share, "b"), 1)
    assert engine.prefix_cache.cached_tokens <= engine.kv_capacity
    assert engine.prefix_cache.evicted_tokens > 0
    await engine.stop()


def test_block_size_is_checked() -> None:
    with pytest.raises(ValueError, match="prefix_block_tokens"):
        EngineConfig(prefix_block_tokens=0)


async def test_cache_hit_rate_is_exported_under_sglang_name() -> None:
    from workers.engine.app import EngineApp

    engine = EmulatedEngine(EngineConfig(time_scale=FAST, prefix_block_tokens=BLOCK))
    engine.start()
    await _run(engine, "s0", words(100), 8)
    await _run(engine, "s1", words(100) + filler_text(0, 8).split(), 1)
    text = EngineApp(engine, "m").metrics_text()
    line = next(x for x in text.splitlines() if x.startswith("sglang:cache_hit_rate"))
    assert 0.4 < float(line.split()[-1]) < 0.6
    await asyncio.sleep(0)
    await engine.stop()
