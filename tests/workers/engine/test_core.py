"""The engine's scheduler: timing from the simulator's model, priorities, preemption, abort."""

from __future__ import annotations

import asyncio

from workers.engine.core import FINISH_ABORT, FINISH_LENGTH, EmulatedEngine, EngineConfig
from workers.sim.llm.latency import ContextLatencyModel

FAST = 0.01


async def test_step_time_is_the_simulator_model_for_the_batch_and_context() -> None:
    engine = EmulatedEngine(EngineConfig(time_scale=FAST))
    engine.start()
    request = engine.submit("a", prompt_tokens=300, max_tokens=3)
    await request.progress(0)  # first token: prefill done, decoding
    seconds, prefills, decode = engine._step_seconds()
    model = ContextLatencyModel()
    if request.finish_reason is None:
        assert prefills == [] and decode == 1
        assert seconds == model.step_seconds(1, 1, request.context_tokens)
    await request.progress(1 << 30)
    assert request.generated == 3 and request.finish_reason == FINISH_LENGTH
    await engine.stop()


async def test_a_step_with_more_running_requests_and_context_is_slower() -> None:
    engine = EmulatedEngine(EngineConfig(time_scale=FAST))
    for i in range(4):
        request = engine.submit(f"r{i}", prompt_tokens=1000, max_tokens=10)
        request.prefill_left = 0
        engine._running[request.rid] = request
    four, _, _ = engine._step_seconds()
    one_engine = EmulatedEngine(EngineConfig(time_scale=FAST))
    single = one_engine.submit("s", prompt_tokens=1000, max_tokens=10)
    single.prefill_left = 0
    one_engine._running["s"] = single
    one, _, _ = one_engine._step_seconds()
    assert four > one


async def test_pending_requests_run_highest_priority_first() -> None:
    engine = EmulatedEngine(EngineConfig(time_scale=FAST, max_batch=1, preemptive=False))
    engine.start()
    first = engine.submit("first", prompt_tokens=10, max_tokens=20)
    await first.progress(0)
    low = engine.submit("low", prompt_tokens=10, max_tokens=5, priority=1)
    high = engine.submit("high", prompt_tokens=10, max_tokens=5, priority=9)
    await asyncio.gather(low.progress(1 << 30), high.progress(1 << 30))
    assert high.finished_at is not None and low.finished_at is not None
    assert high.finished_at < low.finished_at
    assert first.preemptions == 0
    await engine.stop()


async def test_a_higher_priority_request_preempts_the_lowest_running_one() -> None:
    engine = EmulatedEngine(EngineConfig(time_scale=FAST, max_batch=1, preemptive=True))
    engine.start()
    long = engine.submit("long", prompt_tokens=10, max_tokens=200, priority=0)
    await long.progress(0)
    urgent = engine.submit("urgent", prompt_tokens=10, max_tokens=5, priority=5)
    await urgent.progress(1 << 30)
    assert long.finish_reason is None and long.preemptions == 1
    await long.progress(1 << 30)
    assert long.generated == 200 and engine.stats.preemptions == 1
    await engine.stop()


async def test_abort_ends_a_running_request_and_frees_the_batch() -> None:
    engine = EmulatedEngine(EngineConfig(time_scale=FAST))
    engine.start()
    request = engine.submit("x", prompt_tokens=10, max_tokens=100_000)
    await request.progress(2)
    assert engine.abort("x") and not engine.abort("x")
    await request.progress(1 << 30)
    assert request.finish_reason == FINISH_ABORT and engine.num_running == 0
    await engine.stop()


def test_lengths_without_max_tokens_are_seeded() -> None:
    one = EmulatedEngine(EngineConfig(seed=3))
    two = EmulatedEngine(EngineConfig(seed=3))
    assert [one.draw_length() for _ in range(20)] == [two.draw_length() for _ in range(20)]


def test_a_prompt_the_kv_pool_cannot_hold_is_refused() -> None:
    import pytest

    from workers.engine.core import PromptTooLong

    engine = EmulatedEngine(EngineConfig())
    with pytest.raises(PromptTooLong):
        engine.submit("huge", prompt_tokens=int(engine.kv_capacity), max_tokens=1)
    assert engine.num_queued == 0


def _admitted(engine: EmulatedEngine, rid: str, *, share: float, priority: int) -> None:
    """Submit a request holding ``share`` of the KV pool and run one scheduling decision."""
    engine.submit(rid, prompt_tokens=int(share * engine.kv_capacity), max_tokens=50,
                  priority=priority)  # fmt: skip
    engine._schedule()


def test_kv_preemption_is_all_or_nothing() -> None:
    """The pending request outranks one running request, but preempting it would not free
    enough KV (the other one it does not outrank holds the rest): nobody is preempted."""
    engine = EmulatedEngine(EngineConfig(time_scale=FAST))
    _admitted(engine, "low", share=0.4, priority=0)
    _admitted(engine, "high", share=0.4, priority=5)
    _admitted(engine, "middle", share=0.7, priority=3)
    assert set(engine._running) == {"low", "high"}
    assert engine.stats.preemptions == 0 and engine.num_queued == 1


def test_kv_preemption_takes_as_many_victims_as_the_request_needs() -> None:
    engine = EmulatedEngine(EngineConfig(time_scale=FAST))
    _admitted(engine, "a", share=0.4, priority=0)
    _admitted(engine, "b", share=0.4, priority=1)
    _admitted(engine, "urgent", share=0.7, priority=9)
    assert set(engine._running) == {"urgent"}
    assert engine.stats.preemptions == 2
    assert engine._requests["a"].preemptions == engine._requests["b"].preemptions == 1


def test_among_equal_priorities_the_latest_admitted_is_preempted_first() -> None:
    engine = EmulatedEngine(EngineConfig(time_scale=FAST))
    _admitted(engine, "older", share=0.4, priority=0)
    _admitted(engine, "newer", share=0.4, priority=0)
    _admitted(engine, "urgent", share=0.5, priority=9)
    assert set(engine._running) == {"older", "urgent"}
    assert engine._requests["newer"].preemptions == 1
