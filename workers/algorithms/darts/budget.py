"""Adaptive total redundancy budget (darts §4.2.2, App. B Eqs. 6–9).

``U(M̄) = ρ_t·ln M̄ − λ·(k·M̄ + c)`` is maximised at ``M̄* = ρ_t / (λ·k)``; the budget is
``M_total = clip(⌊M̄*⌋, N·M, 2·N·M)``. ``ρ_t = σ̃_L / L̃`` comes from dataset-level moving averages
of the response-length std and mean over preceding steps.

``k`` "is derived from the measured PTL and cluster parameters" (Eq. 6): a property of the cluster,
computed once (``cost.budget_cost_slope``) and held, not re-derived from each step's lengths. The
paper gives no value for λ; it reports that the solved budget averages ``≈ 1.5·N·M`` (App. B,
"Discussion of Redundancy Budget"), so :func:`calibrate_trade_off` sets λ once so that the first
step lands there and Eq. 9 moves the budget with ``ρ_t`` afterwards.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from workers.algorithms.darts.moments import censored_moments


def adaptive_total_budget(
    *, rho: float, trade_off: float, cost_slope: float, prompts: int, group_size: int
) -> int:
    """Eq. 9: ``clip(⌊ρ_t / (λ·k)⌋, N·M, 2·N·M)``.

    ``trade_off`` is λ and ``cost_slope`` is k. A non-positive ``λ·k`` means extra samples cost
    nothing, so the optimum is unbounded and the upper clip applies.
    """
    if prompts <= 0 or group_size <= 0:
        raise ValueError("prompts and group_size must be positive")
    if rho < 0 or not math.isfinite(rho):
        raise ValueError(f"rho must be a finite non-negative number, got {rho}")
    low, high = prompts * group_size, 2 * prompts * group_size
    denominator = trade_off * cost_slope
    if denominator <= 0:
        return high
    optimum = rho / denominator
    if optimum >= high:
        return high
    return max(low, math.floor(optimum))


def calibrate_trade_off(*, rho: float, cost_slope: float, target_budget: float) -> float:
    """λ such that Eq. 8's ``M̄* = ρ / (λ·k)`` equals ``target_budget`` at this ``ρ`` and ``k``.

    A non-positive ``ρ`` or ``k`` leaves nothing to calibrate against; λ is then 0 (Eq. 9 clips
    the unbounded optimum to its upper bound).
    """
    if target_budget <= 0:
        raise ValueError("target_budget must be positive")
    if rho <= 0 or cost_slope <= 0:
        return 0.0
    return rho / (target_budget * cost_slope)


@dataclass
class LengthMomentsEMA:
    """Moving averages of the batch response-length mean and std (the ``L̃``, ``σ̃_L`` of App. B).

    ``decay`` weighs the past: ``new = decay·old + (1−decay)·batch``. The first update sets both.
    A batch's moments are censoring-aware when ``censored`` marks lower-bound lengths (aborted by
    early stop or stopped at the length limit): see :mod:`workers.algorithms.darts.moments`.
    """

    decay: float = 0.9
    mean: float | None = None
    std: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.decay < 1.0:
            raise ValueError("decay must be in [0, 1)")

    def update(
        self,
        lengths: Sequence[float] | np.ndarray,
        censored: Sequence[bool] | np.ndarray | None = None,
        weights: Sequence[float] | np.ndarray | None = None,
    ) -> None:
        """Fold one batch in. ``weights`` per sample: pass ``1/M'_i`` for prompt ``i``'s
        candidates to weigh every prompt equally, as a dataset-level statistic (App. B) does,
        instead of by its redundancy budget, which Alg. 1 sets from the very spread measured."""
        values = np.asarray(lengths, dtype=float)
        if values.size == 0:
            return
        if censored is None and weights is None:
            batch_mean, batch_std = float(values.mean()), float(values.std())
        else:
            flags = np.zeros(values.shape, dtype=bool) if censored is None else censored
            batch_mean, batch_std = censored_moments(values, flags, weights)
        if self.mean is None or self.std is None:
            self.mean, self.std = batch_mean, batch_std
            return
        self.mean = self.decay * self.mean + (1.0 - self.decay) * batch_mean
        self.std = self.decay * self.std + (1.0 - self.decay) * batch_std

    @property
    def rho(self) -> float:
        """``ρ_t = σ̃_L / L̃`` (0 before any update or for an all-empty history)."""
        if self.mean is None or self.std is None or self.mean <= 0:
            return 0.0
        return self.std / self.mean
