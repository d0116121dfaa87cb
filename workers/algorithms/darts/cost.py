"""Rollout cost model (darts §4.2.1, Eq. 4; App. A; App. B Eq. 6).

A group of ``M'`` samples decodes together: while all of them are alive the worker's running batch
is ``M'``; after the shortest finishes it is ``M'-1``; and so on. Each interval between consecutive
sorted lengths costs ``Δl · PTL(batch)``. The per-token latency curve is the shared
:class:`~workers.algorithms.latency.ThreePieceLinear` fitted by
:func:`~workers.algorithms.latency.fit_three_piece_linear` — this module adds no second fit.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.special import ndtri

from workers.algorithms.latency import DEFAULT_PTL_TP1, ThreePieceLinear, fit_three_piece_linear


def fit_ptl_curve(
    batch_sizes: Sequence[float] | np.ndarray, seconds_per_token: Sequence[float] | np.ndarray
) -> ThreePieceLinear:
    """PTL(tp, ·) for one tensor-parallel degree from profile points (darts App. A).

    A thin, named entry point so callers holding engine profiles need not know which module owns
    the fit; the fit itself is :func:`fit_three_piece_linear`.
    """
    return fit_three_piece_linear(
        np.asarray(batch_sizes, dtype=float).tolist(),
        np.asarray(seconds_per_token, dtype=float).tolist(),
    )


def rollout_cost(lengths: Sequence[float] | np.ndarray, ptl: ThreePieceLinear) -> float:
    """Eq. 4: ``Σ_m (l[m] − l[m−1]) · PTL(M' − m + 1)`` over the sorted lengths (``l[0] = 0``).

    ``lengths`` need not be sorted. An empty group costs nothing.
    """
    ordered = np.sort(np.asarray(lengths, dtype=float))
    if ordered.size == 0:
        return 0.0
    if ordered[0] < 0:
        raise ValueError("lengths must be non-negative")
    increments = np.diff(ordered, prepend=0.0)
    running_batch = np.arange(ordered.size, 0, -1, dtype=float)
    return float(np.dot(increments, ptl.evaluate(running_batch)))


def data_parallel_cost(
    groups: Sequence[Sequence[float] | np.ndarray], ptl: ThreePieceLinear
) -> float:
    """Data-parallel rollout: each worker runs its groups' samples together; the slowest decides.

    darts §4.2.1: "In data parallel, we take the maximum latency across groups as the overhead."
    """
    return max((rollout_cost(g, ptl) for g in groups), default=0.0)


def representative_lengths(mean_length: float, std_length: float, count: int) -> np.ndarray:
    """``count`` evenly spaced quantiles of a log-normal with the given mean and std.

    Used to cost a hypothetical batch from dataset-level moving averages (App. B) when no real
    lengths exist yet; log-normal because rollout lengths are right-skewed (darts §3.2.1).
    """
    if count <= 0:
        return np.zeros(0)
    mean = max(float(mean_length), 1e-9)
    var = max(float(std_length), 0.0) ** 2
    sigma2 = np.log1p(var / mean**2)
    mu = np.log(mean) - sigma2 / 2.0
    probabilities = (np.arange(count) + 0.5) / count
    return np.exp(mu + np.sqrt(sigma2) * ndtri(probabilities))


def budget_cost_slope(
    *,
    mean_length: float,
    std_length: float,
    prompts: int,
    group_size: int,
    workers: int = 1,
    ptl: ThreePieceLinear = DEFAULT_PTL_TP1,
) -> float:
    """``k`` of App. B Eq. 6 (``T(M̄) = k·M̄ + c``): seconds of rollout per extra sample.

    Measured on the cost model as the secant between the budget's bounds ``N·M`` and ``2·N·M``:
    the batch of ``M̄`` samples is split evenly over ``workers`` data-parallel workers and each
    worker's share is costed with Eq. 4 on representative lengths.
    """
    if prompts <= 0 or group_size <= 0 or workers <= 0:
        raise ValueError("prompts, group_size and workers must be positive")
    low_total = prompts * group_size

    def batch_cost(total: int) -> float:
        per_worker = -(-total // workers)
        return rollout_cost(representative_lengths(mean_length, std_length, per_worker), ptl)

    return (batch_cost(2 * low_total) - batch_cost(low_total)) / low_total
