"""Censoring-aware response-length moments for the budget's ``ρ_t = σ̃_L / L̃`` (darts App. B).

Early stop (darts §4.3.1) aborts the longest candidates of a pruned prompt and the length limit
stops others: their lengths are only lower bounds. Averaging finished samples alone biases the
moments downward exactly where the tail is. The Kaplan–Meier product-limit estimator
(Kaplan & Meier 1958, "Nonparametric estimation from incomplete observations", JASA 53:457–481)
uses each censored sample as "longer than this"; when the largest observation is censored the
remaining survival mass is put on it (Efron 1967, "The two sample problem with censored data",
Proc. 5th Berkeley Symp. 4:831–853), which makes the moments restricted to the observed range —
still lower bounds for a censored tail, but the least biased ones the data allows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def kaplan_meier_masses(
    lengths: Sequence[float] | np.ndarray,
    censored: Sequence[bool] | np.ndarray,
    weights: Sequence[float] | np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Sorted lengths and the probability mass the product-limit estimate puts on each.

    Ties: events precede censorings at the same length (the usual convention). Masses sum to 1.
    ``weights`` (positive, default 1 each) make it the weighted product-limit estimator: the
    number at risk is the weight still at risk, and an event removes its own weight's share.
    """
    values = np.asarray(lengths, dtype=float)
    flags = np.asarray(censored, dtype=bool)
    if values.shape != flags.shape or values.ndim != 1:
        raise ValueError("lengths and censored must be 1-D arrays of one shape")
    if values.size == 0:
        raise ValueError("need at least one observation")
    mass = np.ones_like(values) if weights is None else np.asarray(weights, dtype=float)
    if mass.shape != values.shape or not np.all(mass > 0) or not np.all(np.isfinite(mass)):
        raise ValueError("weights must be positive and finite, one per length")
    order = np.lexsort((flags, values))
    values, flags, mass = values[order], flags[order], mass[order]
    at_risk = np.cumsum(mass[::-1])[::-1]
    survival = np.cumprod(np.where(flags, 1.0, 1.0 - mass / at_risk))
    before = np.concatenate(([1.0], survival[:-1]))
    masses = before - survival
    masses[-1] += survival[-1]  # Efron's tail: the unresolved mass sits on the largest length
    return values, masses


def censored_moments(
    lengths: Sequence[float] | np.ndarray,
    censored: Sequence[bool] | np.ndarray,
    weights: Sequence[float] | np.ndarray | None = None,
) -> tuple[float, float]:
    """Mean and standard deviation of the Kaplan–Meier (Efron-completed) length distribution.

    With no censored sample this is the plain (weighted) mean and population std.
    """
    values, masses = kaplan_meier_masses(lengths, censored, weights)
    mean = float(masses @ values)
    second = float(masses @ (values * values))
    return mean, math.sqrt(max(second - mean * mean, 0.0))
