"""Variance-based adaptive redundancy allocation (darts §4.2.2 Eq. 5, App. C Alg. 1).

minimise ``Σ_i Norm(σ̃_i) / M'_i`` s.t. ``Σ M'_i = M_total``, ``M_low ≤ M'_i ≤ M_up``.

Alg. 1 starts every prompt at ``M_low`` and repeatedly gives one more sample to the prompt with the
largest marginal gain ``Δ_i = w_i·(1/M'_i − 1/(M'_i+1))`` (``np.argmax`` semantics: the lowest
index wins a tie). Because each prompt's gains shrink as it grows, that loop hands out exactly the
``M_total − N·M_low`` largest entries of the table of all ``(prompt, step)`` gains, taken in the
order (gain descending, prompt index, step). This module computes that selection with one
partition instead of a Python loop; the tests check it against the literal loop and against
brute force.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def min_max_normalise(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """``Norm(·)`` of Eq. 5: min-max over the batch.

    When every value is equal the spread carries no information; all weights are then 1, which
    makes Alg. 1 spread the budget round-robin instead of dividing by zero.
    """
    array = np.asarray(values, dtype=float)
    if array.size == 0:
        return array
    if not np.all(np.isfinite(array)):
        raise ValueError("length statistics must be finite")
    low, high = float(array.min()), float(array.max())
    if high - low <= 0.0:
        return np.ones_like(array)
    return (array - low) / (high - low)


def allocate_redundancy(
    length_stds: Sequence[float] | np.ndarray,
    total_budget: int,
    *,
    lower: int,
    upper: int,
) -> np.ndarray:
    """Alg. 1: samples ``M'_i`` per prompt, summing to ``total_budget``.

    ``length_stds`` are the smoothed σ̃_L per prompt (see ``variance_store.smoothed_stds``);
    ``lower``/``upper`` are ``M_low``/``M_up`` (the paper uses ``M`` and ``2M``).
    """
    stds = np.asarray(length_stds, dtype=float)
    prompts = stds.size
    if lower < 1 or upper < lower:
        raise ValueError(f"need 1 <= lower <= upper, got lower={lower}, upper={upper}")
    extra = total_budget - prompts * lower
    capacity = prompts * (upper - lower)
    if extra < 0 or extra > capacity:
        raise ValueError(
            f"total_budget {total_budget} outside [{prompts * lower}, {prompts * upper}] "
            f"for {prompts} prompts"
        )
    allocation = np.full(prompts, lower, dtype=np.int64)
    if extra == 0:
        return allocation
    weights = min_max_normalise(stds)
    steps = upper - lower
    current = lower + np.arange(steps, dtype=float)  # M'_i before each extra sample
    # Δ in Alg. 1's own arithmetic, w·(1/M' − 1/(M'+1)): gains equal in exact arithmetic then
    # round alike here and in the loop, so a near-tie is broken as the loop breaks it.
    gains = (weights[:, None] * (1.0 / current - 1.0 / (current + 1.0))[None, :]).ravel()
    # Row-major flattening orders entries by (prompt, step), which is Alg. 1's tie-break among
    # equal gains. The ``extra`` largest in that order: every gain above the ``extra``-th largest,
    # then the first entries equal to it (a selection, not a sort of the whole table).
    threshold = np.partition(gains, gains.size - extra)[gains.size - extra]
    above = gains > threshold
    at_threshold = gains == threshold
    chosen = above | (at_threshold & (np.cumsum(at_threshold) <= extra - np.count_nonzero(above)))
    allocation += chosen.reshape(prompts, steps).sum(axis=1)
    return allocation


def allocation_objective(
    length_stds: Sequence[float] | np.ndarray, allocation: Sequence[int] | np.ndarray
) -> float:
    """Eq. 5's objective ``Σ Norm(σ̃_i) / M'_i`` for an allocation (used to compare plans)."""
    weights = min_max_normalise(length_stds)
    return float(np.sum(weights / np.asarray(allocation, dtype=float)))
