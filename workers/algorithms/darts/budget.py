"""Adaptive total redundancy budget (darts §4.2.2, App. B Eqs. 6–9).

``U(M̄) = ρ_t·ln M̄ − λ·(k·M̄ + c)`` is maximised at ``M̄* = ρ_t / (λ·k)``; the budget is
``M_total = clip(⌊M̄*⌋, N·M, 2·N·M)``. ``ρ_t = σ̃_L / L̃`` comes from dataset-level moving averages
of the response-length std and mean over preceding steps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


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


@dataclass
class LengthMomentsEMA:
    """Moving averages of the batch response-length mean and std (the ``L̃``, ``σ̃_L`` of App. B).

    ``decay`` weighs the past: ``new = decay·old + (1−decay)·batch``. The first update sets both.
    """

    decay: float = 0.9
    mean: float | None = None
    std: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.decay < 1.0:
            raise ValueError("decay must be in [0, 1)")

    def update(self, lengths: Sequence[float] | np.ndarray) -> None:
        values = np.asarray(lengths, dtype=float)
        if values.size == 0:
            return
        batch_mean, batch_std = float(values.mean()), float(values.std())
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
