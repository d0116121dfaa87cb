"""The context-aware engine model: fitted to its published source, physically ordered."""

from __future__ import annotations

import numpy as np
import pytest

from workers.sim.llm.latency import (
    FITTED_EFFICIENCY,
    NIM_LLAMA33_70B_TP2_5000_500,
    PUBLISHED_ITL,
    QWEN3_14B,
    ContextLatencyModel,
    predicted_itl,
)
from workers.sim.llm.profiler import fit_kappa, profile_planner_model


def test_fit_reproduces_the_published_table_and_stays_physical() -> None:
    assert 0.3 < FITTED_EFFICIENCY.efficiency <= 1.0
    assert 0.0 <= FITTED_EFFICIENCY.step_overhead_s < 0.01
    for table in PUBLISHED_ITL:
        predicted = predicted_itl(table, FITTED_EFFICIENCY)
        np.testing.assert_allclose(predicted, table.itl_s, rtol=0.05)
    # the concurrency slope is what the KV and prefill terms must explain
    rows = predicted_itl(NIM_LLAMA33_70B_TP2_5000_500, FITTED_EFFICIENCY)
    assert np.all(np.diff(rows) > 0)


def test_qwen3_14b_kv_bytes_per_token() -> None:
    assert QWEN3_14B.kv_bytes_per_token == 2 * 40 * 8 * 128 * 2  # 160 KiB


def test_step_time_rises_with_context_and_falls_with_mp() -> None:
    model = ContextLatencyModel()
    short = model.step_seconds(1, 32, 32 * 1_000)
    long = model.step_seconds(1, 32, 32 * 20_000)
    assert long > 1.5 * short
    times = [model.step_seconds(m, 1, 1_000) for m in (1, 2, 4, 8)]
    assert times == sorted(times, reverse=True)
    speedup8 = times[0] / times[-1]
    assert 1.5 < speedup8 < 8.0  # sub-linear: overhead and all-reduces do not shrink


def test_kv_capacity_grows_faster_than_the_gpu_count() -> None:
    model = ContextLatencyModel()
    one = model.kv_capacity_tokens(1)
    assert one == pytest.approx((80e9 * 0.88 - QWEN3_14B.weight_bytes) / (160 * 1024))
    assert model.kv_capacity_tokens(2) > 2 * one  # the weights are paid once per worker


def test_prefill_of_a_late_chunk_costs_more_than_an_early_one() -> None:
    model = ContextLatencyModel()
    early = model.prefill_seconds_per_token(1, 1_000, 0)
    late = model.prefill_seconds_per_token(1, 1_000, 30_000)
    assert late > early > 0


def test_profiled_planner_model_matches_the_engine_at_its_operating_point() -> None:
    model = ContextLatencyModel()
    planner = profile_planner_model(
        model, mean_context=4_000, mean_prefill_tokens=500, max_batch=48
    )
    for m in (1, 2, 4, 8):
        for batch in (1, 16, 48 * m):
            engine = model.step_seconds(m, batch, batch * 4_000)
            assert planner.per_token_seconds(batch, m) == pytest.approx(engine, rel=0.05)
    amdahl = profile_planner_model(
        model, mean_context=4_000, mean_prefill_tokens=500, max_batch=48, per_degree=False
    )
    assert amdahl.profiled == ()
    kappa = fit_kappa(model, 4_000, [1.0, 8.0, 48.0])
    assert amdahl.comm_overhead > 0 and kappa > 0
