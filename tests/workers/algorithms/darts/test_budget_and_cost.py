"""Eq. 4 cost model, App. B budget clip, moving averages and the variance store."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.algorithms.darts import (
    InMemoryLengthVarianceStore,
    LengthMomentsEMA,
    adaptive_total_budget,
    budget_cost_slope,
    data_parallel_cost,
    fit_ptl_curve,
    representative_lengths,
    rollout_cost,
    smoothed_stds,
)
from workers.algorithms.latency import DEFAULT_PTL_TP1, ThreePieceLinear

FLAT = ThreePieceLinear(y0=1.0, slopes=(0.0, 0.0, 0.0), breakpoints=(10, 20))


def test_rollout_cost_eq4_by_hand():
    ptl = ThreePieceLinear(y0=1.0, slopes=(1.0, 1.0, 1.0), breakpoints=(10, 20))  # PTL(b) = 1 + b
    # sorted 2, 5, 9: 2 tokens at batch 3, 3 at batch 2, 4 at batch 1
    assert rollout_cost([9, 2, 5], ptl) == pytest.approx(2 * 4 + 3 * 3 + 4 * 2)
    assert rollout_cost([], ptl) == 0.0


def test_flat_ptl_cost_is_longest_length():
    assert rollout_cost([3, 100, 7], FLAT) == pytest.approx(100.0)


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 5000), min_size=1, max_size=20),
    extra=st.integers(1, 5000),
    index=st.integers(0, 19),
)
def test_cost_monotone_in_lengths_and_samples(lengths, extra, index):
    base = rollout_cost(lengths, DEFAULT_PTL_TP1)
    longer = list(lengths)
    longer[index % len(longer)] += extra
    assert rollout_cost(longer, DEFAULT_PTL_TP1) > base
    assert rollout_cost([*lengths, extra], DEFAULT_PTL_TP1) >= base


def test_data_parallel_cost_is_slowest_group():
    groups = [[10, 20], [5, 500], [100]]
    assert data_parallel_cost(groups, DEFAULT_PTL_TP1) == pytest.approx(
        rollout_cost([5, 500], DEFAULT_PTL_TP1)
    )


def test_fit_ptl_curve_recovers_default_profile():
    batches = np.arange(1, 257, 5, dtype=float)
    fitted = fit_ptl_curve(batches, DEFAULT_PTL_TP1.evaluate(batches))
    assert np.allclose(fitted.evaluate(batches), DEFAULT_PTL_TP1.evaluate(batches), rtol=0.02)


def test_representative_lengths_match_moments():
    lengths = representative_lengths(1000.0, 600.0, 2000)
    assert lengths.mean() == pytest.approx(1000.0, rel=0.03)
    assert lengths.std() == pytest.approx(600.0, rel=0.1)
    assert np.all(np.diff(lengths) >= 0)


def test_cost_slope_positive_and_grows_with_length():
    short = budget_cost_slope(mean_length=500, std_length=300, prompts=32, group_size=8, workers=2)
    long = budget_cost_slope(mean_length=2000, std_length=1200, prompts=32, group_size=8, workers=2)
    assert 0 < short < long


@pytest.mark.parametrize(
    ("rho", "expected"),
    [(0.0, 64), (63.9, 64), (100.0, 100), (100.9, 100), (127.5, 127), (1000.0, 128), (1e9, 128)],
)
def test_budget_is_floor_then_clip(rho, expected):
    # N = 8, M = 8: bounds 64 and 128; λ·k = 1 so M̄* = ρ
    budget = adaptive_total_budget(rho=rho, trade_off=0.5, cost_slope=2.0, prompts=8, group_size=8)
    assert budget == expected


def test_budget_inside_bounds_uses_eq8():
    budget = adaptive_total_budget(
        rho=3.0, trade_off=0.02, cost_slope=1.0, prompts=8, group_size=12
    )
    assert budget == 150  # ⌊3 / 0.02⌋ inside [96, 192]


def test_budget_free_extra_samples_take_upper_bound():
    assert (
        adaptive_total_budget(rho=1.0, trade_off=0.0, cost_slope=1.0, prompts=4, group_size=8) == 64
    )


def test_length_moments_ema():
    moments = LengthMomentsEMA(decay=0.5)
    assert moments.rho == 0.0
    moments.update([10, 30])  # mean 20, std 10
    assert (moments.mean, moments.std) == (20.0, 10.0)
    moments.update([40, 40])  # mean 40, std 0
    assert moments.mean == pytest.approx(30.0)
    assert moments.std == pytest.approx(5.0)
    assert moments.rho == pytest.approx(5.0 / 30.0)


def test_variance_store_ema_and_unseen_fill():
    store = InMemoryLengthVarianceStore(decay=0.5)
    store.observe("a", [10, 30])  # var 100
    store.observe("a", [5, 5])  # var 0 -> 50
    store.observe("b", [0, 40])  # var 400
    store.observe("c", [7])  # one sample: ignored
    variances = store.variances(["a", "b", "c"])
    assert variances[:2].tolist() == [50.0, 400.0]
    assert np.isnan(variances[2])
    stds = smoothed_stds(store, ["a", "b", "c"])
    assert stds[2] == pytest.approx(np.sqrt(np.median([50.0, 400.0])))
    assert smoothed_stds(InMemoryLengthVarianceStore(), ["x", "y"]).tolist() == [0.0, 0.0]


def test_variance_store_counts_aborted_lengths_as_lower_bounds():
    lengths = [10, 20, 30, 35, 35]
    aborted = [False, False, False, True, True]  # early stop cut the two longest at 35
    plain, censored = InMemoryLengthVarianceStore(), InMemoryLengthVarianceStore()
    plain.observe("p", lengths)
    censored.observe("p", lengths, aborted)
    assert plain.variances(["p"])[0] == pytest.approx(np.var(lengths))
    # Kaplan–Meier with Efron's tail: the censored mass sits on the largest length, as here
    assert censored.variances(["p"])[0] == pytest.approx(np.var(lengths))
    uncensored = InMemoryLengthVarianceStore()
    uncensored.observe("p", lengths, [False] * 5)
    assert uncensored.variances(["p"])[0] == pytest.approx(np.var(lengths))
    early = InMemoryLengthVarianceStore()
    early.observe("p", [10, 20, 30, 12, 14], [False, False, False, True, True])
    raw = InMemoryLengthVarianceStore()
    raw.observe("p", [10, 20, 30, 12, 14])
    assert early.variances(["p"])[0] > raw.variances(["p"])[0]
