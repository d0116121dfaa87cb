"""The worker under the context-aware engine: KV-dependent steps, chunked prefill, KV pool."""

from __future__ import annotations

import pytest

from workers.sim.events import EventLoop
from workers.sim.llm.cost import ContextCost
from workers.sim.llm.latency import ContextLatencyModel
from workers.sim.llm.worker import GenerationRequest, GenerationResult, LLMWorker

MODEL = ContextLatencyModel()


def make_worker(loop: EventLoop, **kwargs: object) -> LLMWorker:
    options: dict = {"cost": ContextCost(MODEL, 1), "max_batch": 256}
    options.update(kwargs)
    return LLMWorker(loop, 0, **options)


def test_a_lone_request_prefills_in_chunks_then_decodes_with_growing_context() -> None:
    loop = EventLoop()
    results: list[GenerationResult] = []
    worker = make_worker(loop)
    worker.submit(
        GenerationRequest("r", 1_000, context_tokens=2_000, cache_key="t", on_done=results.append)
    )
    loop.run()
    chunk = MODEL.chunk_tokens
    kv = MODEL.kv_seconds_per_token(1)
    prefill = (2_000 / chunk) * (MODEL.base_step_seconds(1, 0, chunk) + kv * 2_000) + (
        2_000 * MODEL.prefill_seconds_per_token(1, 2_000, 0)
    )
    decode = 1_000 * (MODEL.base_step_seconds(1, 1, 0) + kv * 2_000) + kv * 1_000**2 / 2
    assert results[0].finished_at == pytest.approx(prefill + decode, rel=1e-9)
    assert worker.cached_tokens("t") == 3_000
    assert worker.active_kv_tokens == pytest.approx(0.0, abs=1e-6)


def test_a_prefill_slows_the_decoding_batch_but_does_not_stall_it() -> None:
    loop = EventLoop()
    results: list[GenerationResult] = []
    worker = make_worker(loop)
    worker.submit(GenerationRequest("decoding", 2_000, on_done=results.append))

    def abort(request_id: str) -> None:
        worker.abort(request_id)

    long = GenerationRequest("long", 10, context_tokens=30_000)
    loop.after(0.1, lambda: worker.submit(long))
    loop.after(1.0, lambda: abort("decoding"))  # the 30 k-token prefill is still running
    loop.run()
    step = MODEL.base_step_seconds(1, 1, 0)
    before = 0.1 / step
    (result,) = results
    assert worker.stats.prefill_tokens == 30_000
    assert before + 1 < result.output_tokens < 1.0 / step  # progress, slower than alone


def test_kv_overflow_retracts_the_latest_admitted_and_everything_finishes() -> None:
    loop = EventLoop()
    results: list[GenerationResult] = []
    worker = make_worker(loop)
    capacity = worker.kv.capacity
    count = 40
    for i in range(count):  # each grows to ~capacity/20: twice what the pool holds
        worker.submit(
            GenerationRequest(
                f"r{i}",
                int(capacity / 30),
                context_tokens=int(capacity / 60),
                cache_key=f"k{i}",
                on_done=results.append,
            )
        )
    loop.run()
    assert len(results) == count and not any(r.aborted for r in results)
    assert worker.stats.kv_preemptions > 0
    assert sum(r.output_tokens for r in results) == count * int(capacity / 30)
    first = min(results, key=lambda r: r.first_scheduled_at or 0.0)
    assert first.preemptions == 0  # the oldest run is never the victim among equals


def test_migration_into_a_full_pool_is_refused() -> None:
    loop = EventLoop()
    worker = make_worker(loop)
    capacity = int(worker.kv.capacity)
    assert worker.insert_cache("a", capacity // 2)
    assert not worker.insert_cache("b", capacity + 1)
    worker.submit(GenerationRequest("big", 10_000, context_tokens=capacity - 5_000))
    loop.after(1.0, lambda: None)
    loop.run(until=1.0)
    assert worker.cached_tokens("a") == 0  # evicted to admit the running request
    assert not worker.insert_cache("c", 10_000)


def test_admission_waits_for_kv_room() -> None:
    loop = EventLoop()
    results: list[GenerationResult] = []
    worker = make_worker(loop)
    capacity = int(worker.kv.capacity)
    worker.submit(
        GenerationRequest("a", 100, context_tokens=capacity // 2 + 1_000, on_done=results.append)
    )
    worker.submit(
        GenerationRequest("b", 100, context_tokens=capacity // 2 + 1_000, on_done=results.append)
    )
    loop.run()
    a, b = sorted(results, key=lambda r: r.request_id)
    assert b.first_scheduled_at == pytest.approx(a.finished_at)
    assert a.preemptions == b.preemptions == 0


def test_a_request_turned_away_for_kv_evicts_no_cached_prefix() -> None:
    """SGLang counts evictable prefixes as room when it admits, and evicts only for a request it
    admits: one that does not fit even over an empty cache leaves the cache alone."""
    loop = EventLoop()
    worker = make_worker(loop)
    capacity = int(worker.kv.capacity)
    worker.submit(GenerationRequest("running", 100_000, context_tokens=capacity * 6 // 10))
    for i in range(5):  # prefixes of trajectories away in a tool call
        assert worker.insert_cache(f"tool{i}", capacity // 20)
    worker.submit(GenerationRequest("too_big", 10, context_tokens=capacity // 2, cache_key="x"))
    assert worker.pending_count == 1 and worker.running_count == 1
    assert [worker.cached_tokens(f"tool{i}") for i in range(5)] == [capacity // 20] * 5


def _running(worker: LLMWorker, request_id: str) -> bool:
    return request_id in worker._active  # the running set


def test_a_kv_short_preemption_is_all_or_nothing() -> None:
    """heddle Alg. 1 on a KV-bound worker (SGLang's preempt_to_schedule): outranked running
    requests are preempted, lowest first, only when together they free room for the pending one."""
    loop = EventLoop()
    worker = make_worker(loop, preemptive=True)
    capacity = int(worker.kv.capacity)
    worker.submit(GenerationRequest("low", 100_000, context_tokens=capacity // 10, priority=1))
    worker.submit(GenerationRequest("high", 100_000, context_tokens=capacity // 2, priority=9))
    # needs more than "low" frees; "high" outranks it: nobody is preempted
    worker.submit(GenerationRequest("mid", 10, context_tokens=capacity * 6 // 10, priority=5))
    assert worker.stats.preemptions == 0
    assert _running(worker, "low") and _running(worker, "high") and not _running(worker, "mid")
    # fits once "low" leaves: exactly that one victim
    worker.submit(GenerationRequest("top", 10, context_tokens=capacity * 45 // 100, priority=7))
    assert worker.stats.preemptions == 1
    assert _running(worker, "top") and _running(worker, "high") and not _running(worker, "low")


def test_a_kv_short_preemption_takes_as_many_victims_as_the_room_needs() -> None:
    loop = EventLoop()
    worker = make_worker(loop, preemptive=True)
    capacity = int(worker.kv.capacity)
    for i in range(3):
        worker.submit(
            GenerationRequest(f"low{i}", 100_000, context_tokens=capacity * 3 // 10, priority=i)
        )
    worker.submit(GenerationRequest("urgent", 10, context_tokens=capacity // 2, priority=9))
    assert worker.stats.preemptions == 2  # the two lowest; one alone would not make room
    assert _running(worker, "urgent") and _running(worker, "low2")
    assert not _running(worker, "low0") and not _running(worker, "low1")
