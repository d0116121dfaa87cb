"""The simulated LLM worker: continuous batching timing, cache, preemption, abort."""

from __future__ import annotations

import pytest

from workers.sim.events import EventLoop
from workers.sim.llm.worker import GenerationRequest, GenerationResult, LLMWorker, WorkerPool


def linear_ptl(batch: int) -> float:
    return 0.01 * (1 + 0.1 * (batch - 1))  # 10 ms at batch 1, +1 ms per extra request


def make_worker(loop: EventLoop, **kwargs: object) -> LLMWorker:
    options: dict = {"per_token_seconds": linear_ptl, "prefill_seconds_per_token": 0.001}
    options.update(kwargs)
    return LLMWorker(loop, 0, **options)


def test_single_request_time_is_prefill_plus_tokens_times_ptl() -> None:
    loop = EventLoop()
    results: list[GenerationResult] = []
    worker = make_worker(loop)
    worker.submit(GenerationRequest("r", 100, context_tokens=50, on_done=results.append))
    loop.run()
    (result,) = results
    assert result.finished_at == pytest.approx(50 * 0.001 + 100 * 0.01)
    assert result.prefill_tokens == 50 and result.output_tokens == 100
    assert worker.stats.tokens_generated == pytest.approx(100)


def test_continuous_batching_shares_per_token_time() -> None:
    loop = EventLoop()
    done: dict[str, float] = {}
    worker = make_worker(loop)
    for rid, tokens in [("short", 10), ("long", 30)]:
        worker.submit(
            GenerationRequest(
                rid, tokens, on_done=lambda r: done.__setitem__(r.request_id, r.finished_at)
            )
        )
    loop.run()
    assert done["short"] == pytest.approx(10 * linear_ptl(2))
    assert done["long"] == pytest.approx(10 * linear_ptl(2) + 20 * linear_ptl(1))


def test_batch_cap_queues_and_prefix_cache_skips_prefill() -> None:
    loop = EventLoop()
    results: list[GenerationResult] = []
    worker = make_worker(loop, max_batch=1)
    worker.submit(
        GenerationRequest("a", 10, context_tokens=100, cache_key="t", on_done=results.append)
    )
    worker.submit(GenerationRequest("b", 10, on_done=results.append))
    loop.run()
    first, second = sorted(results, key=lambda r: r.finished_at)
    assert second.queueing_seconds == pytest.approx(first.finished_at)
    assert worker.cached_tokens("t") == 110
    worker.submit(
        GenerationRequest("a2", 5, context_tokens=130, cache_key="t", on_done=results.append)
    )
    loop.run()
    assert results[-1].cached_tokens == 110 and results[-1].prefill_tokens == 20


def test_cache_is_lru_evicted_beyond_capacity() -> None:
    loop = EventLoop()
    worker = make_worker(loop, cache_capacity_tokens=150)
    for key in ("x", "y"):
        worker.submit(GenerationRequest(key, 10, context_tokens=90, cache_key=key))
        loop.run()
    assert worker.cached_tokens("x") == 0 and worker.cached_tokens("y") == 100
    worker.insert_cache("z", 40)
    worker.drop_cache("y")
    assert worker.cached_tokens("z") == 40 and worker.cached_tokens("y") == 0


def test_preemption_of_the_lowest_priority_keeps_its_kv() -> None:
    loop = EventLoop()
    results: dict[str, GenerationResult] = {}
    worker = make_worker(loop, max_batch=1, preemptive=True)

    def record(result: GenerationResult) -> None:
        results[result.request_id] = result

    worker.submit(GenerationRequest("low", 100, context_tokens=10, priority=1, on_done=record))
    loop.after(
        0.5, lambda: worker.submit(GenerationRequest("high", 20, priority=9, on_done=record))
    )
    loop.run()
    low, high = results["low"], results["high"]
    assert low.preemptions == 1 and high.preemptions == 0
    assert high.queueing_seconds == 0.0
    assert high.finished_at == pytest.approx(0.5 + 20 * 0.01)
    assert low.prefill_tokens == 10  # prefilled once, not again after the preemption
    assert low.finished_at == pytest.approx(0.01 + 100 * 0.01 + 20 * 0.01)
    assert low.queueing_seconds == pytest.approx(20 * 0.01)


def rekey(worker: LLMWorker, request_id: str, priority: float) -> None:
    assert worker.reprioritize(request_id, priority)


def test_a_raised_priority_preempts_and_a_lowered_one_is_preempted() -> None:
    loop = EventLoop()
    results: dict[str, GenerationResult] = {}
    worker = make_worker(loop, max_batch=1, preemptive=True)

    def record(result: GenerationResult) -> None:
        results[result.request_id] = result

    worker.submit(GenerationRequest("first", 100, priority=5, on_done=record))
    worker.submit(GenerationRequest("second", 20, priority=1, on_done=record))
    # a refreshed prediction: the pending request now outranks the running one
    loop.after(0.5, lambda: rekey(worker, "second", 9))
    loop.run()
    first, second = results["first"], results["second"]
    assert first.preemptions == 1 and second.preemptions == 0
    assert second.finished_at == pytest.approx(0.5 + 20 * 0.01)
    assert first.finished_at == pytest.approx(0.5 + 20 * 0.01 + 50 * 0.01)

    loop = EventLoop()
    results.clear()
    worker = make_worker(loop, max_batch=1, preemptive=True)
    worker.submit(GenerationRequest("first", 100, priority=5, on_done=record))
    worker.submit(GenerationRequest("second", 20, priority=1, on_done=record))
    # the running one falls below the pending one
    loop.after(0.5, lambda: rekey(worker, "first", 0))
    loop.run()
    assert results["first"].preemptions == 1
    assert results["second"].finished_at == pytest.approx(0.5 + 20 * 0.01)
    assert not worker.reprioritize("gone", 3)


def test_non_preemptive_worker_never_preempts() -> None:
    loop = EventLoop()
    worker = make_worker(loop, max_batch=1)
    worker.submit(GenerationRequest("low", 50, priority=1))
    loop.after(0.1, lambda: worker.submit(GenerationRequest("high", 5, priority=9)))
    loop.run()
    assert worker.stats.preemptions == 0


def test_abort_running_and_pending_requests() -> None:
    loop = EventLoop()
    results: dict[str, GenerationResult] = {}
    pool = WorkerPool([make_worker(loop, max_batch=1)])
    for rid in ("run", "wait"):
        pool.submit(
            GenerationRequest(rid, 100, on_done=lambda r: results.__setitem__(r.request_id, r))
        )

    def abort(request_id: str) -> None:
        pool.abort(request_id)

    loop.after(0.25, lambda: abort("run"))
    loop.after(0.20, lambda: abort("wait"))
    loop.run()
    assert results["run"].aborted and results["run"].output_tokens == 25
    assert results["wait"].aborted and results["wait"].output_tokens == 0
    assert results["wait"].queueing_seconds == pytest.approx(0.20)
    assert not pool.abort("run")  # unknown id: a no-op
    assert pool.workers[0].load == 0


def test_pool_routes_to_least_loaded_and_rejects_duplicates() -> None:
    loop = EventLoop()
    pool = WorkerPool([LLMWorker(loop, i, per_token_seconds=linear_ptl) for i in range(3)])
    chosen = [pool.submit(GenerationRequest(f"r{i}", 10)).worker_id for i in range(3)]
    assert sorted(chosen) == [0, 1, 2]
    with pytest.raises(KeyError):
        pool.submit(GenerationRequest("r0", 10), worker_id=chosen[0])
    with pytest.raises(ValueError):
        pool.submit(GenerationRequest("neg", -1), worker_id=0)


def test_a_resumed_request_finishes_after_all_its_tokens() -> None:
    """A preempted run's finish entry must not end the resumed run early (it outlived its run
    while another request kept the finish heap's top)."""
    loop = EventLoop()
    results: dict[str, GenerationResult] = {}

    def record(result: GenerationResult) -> None:
        results[result.request_id] = result

    worker = make_worker(loop, per_token_seconds=lambda batch: 0.01, max_batch=2, preemptive=True)
    worker.submit(GenerationRequest("other", 80, priority=5, on_done=record))
    worker.submit(GenerationRequest("low", 100, priority=1, on_done=record))
    loop.after(
        0.2, lambda: worker.submit(GenerationRequest("high", 20, priority=9, on_done=record))
    )
    loop.run()
    assert results["low"].preemptions == 1
    assert results["low"].finished_at == pytest.approx(1.2)
    assert results["other"].finished_at == pytest.approx(0.8)
