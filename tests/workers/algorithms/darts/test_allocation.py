"""Alg. 1 (darts App. C) against its literal loop and against brute force on small inputs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.algorithms.darts import allocate_redundancy, allocation_objective, min_max_normalise


def literal_algorithm_1(stds: list[float], total: int, lower: int, upper: int) -> list[int]:
    """Alg. 1 line by line: a Python while-loop with np.argmax over marginal gains."""
    weights = min_max_normalise(stds)
    allocation = [lower] * len(stds)
    remain = total - len(stds) * lower
    while remain > 0:
        gains = np.array(
            [
                weights[i] * (1 / m - 1 / (m + 1)) if m < upper else -np.inf
                for i, m in enumerate(allocation)
            ]
        )
        best = int(np.argmax(gains))
        allocation[best] += 1
        remain -= 1
    return allocation


def brute_force_optimum(stds: list[float], total: int, lower: int, upper: int) -> float:
    best = np.inf
    for plan in itertools.product(range(lower, upper + 1), repeat=len(stds)):
        if sum(plan) == total:
            best = min(best, allocation_objective(stds, plan))
    return float(best)


@settings(max_examples=60, deadline=None)
@given(
    stds=st.lists(st.floats(0.0, 500.0, allow_nan=False), min_size=1, max_size=4),
    group_size=st.integers(1, 3),
    data=st.data(),
)
def test_matches_literal_loop_and_is_optimal(stds, group_size, data):
    lower, upper = group_size, 2 * group_size
    total = data.draw(st.integers(len(stds) * lower, len(stds) * upper))
    allocation = allocate_redundancy(stds, total, lower=lower, upper=upper)
    assert allocation.tolist() == literal_algorithm_1(stds, total, lower, upper)
    assert int(allocation.sum()) == total
    assert allocation.min() >= lower and allocation.max() <= upper
    assert allocation_objective(stds, allocation) == pytest.approx(
        brute_force_optimum(stds, total, lower, upper), abs=1e-12
    )


def test_high_variance_prompts_get_more_samples():
    stds = [10.0, 400.0, 50.0, 900.0]
    allocation = allocate_redundancy(stds, 4 * 8 + 10, lower=8, upper=16)
    assert allocation[3] >= allocation[1] >= allocation[2] >= allocation[0]
    assert allocation[0] == 8  # the minimum-variance prompt has weight 0 after min-max


def test_equal_variances_spread_round_robin():
    allocation = allocate_redundancy([5.0] * 4, 4 * 4 + 6, lower=4, upper=8)
    assert sorted(allocation.tolist()) == [5, 5, 6, 6]


def test_budget_outside_bounds_is_rejected():
    with pytest.raises(ValueError, match="outside"):
        allocate_redundancy([1.0, 2.0], 5, lower=4, upper=8)
    with pytest.raises(ValueError, match="outside"):
        allocate_redundancy([1.0, 2.0], 17, lower=4, upper=8)


def test_non_finite_statistics_are_rejected():
    with pytest.raises(ValueError, match="finite"):
        allocate_redundancy([1.0, float("nan")], 10, lower=4, upper=8)


@settings(max_examples=40, deadline=None)
@given(
    stds=st.lists(st.integers(0, 3), min_size=2, max_size=60),
    group_size=st.integers(1, 8),
    data=st.data(),
)
def test_many_tied_gains_follow_the_literal_loop(stds, group_size, data):
    """Few distinct variances: the selection's cut falls among many equal gains, where only the
    (prompt, step) order decides, as Alg. 1's argmax does."""
    lower, upper = group_size, 2 * group_size
    total = data.draw(st.integers(len(stds) * lower, len(stds) * upper))
    allocation = allocate_redundancy([float(s) for s in stds], total, lower=lower, upper=upper)
    assert allocation.tolist() == literal_algorithm_1([float(s) for s in stds], total, lower, upper)
