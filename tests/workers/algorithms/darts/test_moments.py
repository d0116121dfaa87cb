"""Kaplan–Meier length moments with censored (aborted / length-capped) samples, and λ's
calibration to a target budget."""

from __future__ import annotations

import numpy as np
import pytest

from workers.algorithms.darts import (
    LengthMomentsEMA,
    adaptive_total_budget,
    calibrate_trade_off,
    censored_moments,
    kaplan_meier_masses,
)


def test_uncensored_moments_are_plain_mean_and_std():
    lengths = np.array([3.0, 9.0, 1.0, 5.0])
    mean, std = censored_moments(lengths, np.zeros(4, dtype=bool))
    assert mean == pytest.approx(lengths.mean())
    assert std == pytest.approx(lengths.std())


def test_product_limit_masses_by_hand():
    # 1 (event), 2 (censored), 3 (event), 4 (event): S drops by 1/4 at 1; the censored 2 passes
    # its quarter on to the two later lengths, which get 3/8 each.
    values, masses = kaplan_meier_masses([3, 2, 1, 4], [False, True, False, False])
    assert values.tolist() == [1, 2, 3, 4]
    assert masses.tolist() == pytest.approx([0.25, 0.0, 0.375, 0.375])


def test_largest_censored_keeps_its_mass_efron():
    _values, masses = kaplan_meier_masses([1, 2, 10], [False, False, True])
    assert masses.sum() == pytest.approx(1.0)
    assert masses[-1] == pytest.approx(1 / 3)


def test_censoring_aware_mean_recovers_what_finished_only_loses():
    rng = np.random.default_rng(0)
    true = rng.lognormal(7.0, 0.8, 20_000)
    # Abort every sample still running at a random point beyond the 40th percentile.
    stop = np.quantile(true, 0.4) + rng.exponential(np.quantile(true, 0.5), true.size)
    observed = np.minimum(true, stop)
    censored = true > stop
    finished_only = true[~censored].mean()
    km_mean, _ = censored_moments(observed, censored)
    assert abs(km_mean - true.mean()) < abs(finished_only - true.mean())
    assert km_mean <= true.mean() * 1.02  # restricted to the observed range: no overshoot


def test_ema_takes_censored_batches():
    moments = LengthMomentsEMA(decay=0.5)
    moments.update([10, 20, 30])
    moments.update([10, 20, 30], censored=[False, False, True])
    assert moments.mean == pytest.approx(20.0)
    moments.update([10, 10], censored=[False, True])
    assert moments.mean == pytest.approx(15.0)


def test_calibrated_trade_off_puts_first_budget_at_target():
    rho, slope, prompts, group = 0.9, 0.37, 64, 8
    trade_off = calibrate_trade_off(rho=rho, cost_slope=slope, target_budget=1.5 * prompts * group)
    budget = adaptive_total_budget(
        rho=rho, trade_off=trade_off, cost_slope=slope, prompts=prompts, group_size=group
    )
    assert budget in (767, 768)  # ⌊·⌋ of a float that lands on 768
    # Held fixed, λ lets the budget follow ρ: a shrinking spread asks for fewer extra samples.
    smaller = adaptive_total_budget(
        rho=0.7, trade_off=trade_off, cost_slope=slope, prompts=prompts, group_size=group
    )
    assert smaller < budget
    assert calibrate_trade_off(rho=0.0, cost_slope=slope, target_budget=10) == 0.0
    with pytest.raises(ValueError):
        calibrate_trade_off(rho=rho, cost_slope=slope, target_budget=0)


def test_weighted_moments_weigh_each_prompt_equally():
    # prompt A drew 4 candidates of 10, prompt B 2 of 40: per prompt, the mean is 25
    lengths = [10, 10, 10, 10, 40, 40]
    weights = [0.25] * 4 + [0.5] * 2
    mean, std = censored_moments(lengths, [False] * 6, weights)
    assert mean == pytest.approx(25.0)
    assert std == pytest.approx(15.0)
    assert censored_moments(lengths, [False] * 6, [1.0] * 6) == pytest.approx(
        censored_moments(lengths, [False] * 6)
    )
    _values, masses = kaplan_meier_masses([1, 2, 10], [False, True, False], [2.0, 1.0, 1.0])
    assert masses.tolist() == pytest.approx([0.5, 0.0, 0.5])
    with pytest.raises(ValueError, match="weights"):
        censored_moments([1, 2], [False, False], [1.0, 0.0])
    moments = LengthMomentsEMA()
    moments.update(lengths, weights=weights)
    assert moments.mean == pytest.approx(25.0)
