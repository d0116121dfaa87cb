"""One step's DARTS plan: budget (App. B) → allocation (Alg. 1) → sampling modes (Alg. 2).

The shaper service, the simulator and the benchmarks all call :func:`plan_batch`; afterwards they
drive one :class:`~workers.algorithms.darts.sampling.GroupRollout` per prompt (streaming) or call
:func:`~workers.algorithms.darts.sampling.select_training_groups` on the finished batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from workers.algorithms.darts.allocation import allocate_redundancy
from workers.algorithms.darts.budget import adaptive_total_budget
from workers.algorithms.darts.sampling import GroupRollout


@dataclass(frozen=True)
class DartsConfig:
    """Knobs of DARTS; defaults are the paper's (§4.2.2: ``M_low = M``, ``M_up = 2M``; §5.6:
    ``L = 1``). ``trade_off`` is λ of App. B, in 1/seconds of rollout cost per unit of ρ."""

    group_size: int = 8
    longest: int = 1
    lower: int | None = None
    upper: int | None = None
    trade_off: float = 1.0
    tail_pruning: bool = True

    def __post_init__(self) -> None:
        if self.group_size < 1:
            raise ValueError("group_size must be at least 1")
        if not 0 <= self.longest <= self.group_size:
            raise ValueError("need 0 <= longest <= group_size")
        if self.lower_bound > self.upper_bound or self.lower_bound < self.group_size:
            raise ValueError("need group_size <= lower <= upper")
        if self.trade_off < 0:
            raise ValueError("trade_off must be non-negative")

    @property
    def lower_bound(self) -> int:
        return self.group_size if self.lower is None else self.lower

    @property
    def upper_bound(self) -> int:
        return 2 * self.group_size if self.upper is None else self.upper


@dataclass(frozen=True)
class BatchPlan:
    """How many candidates to draw per prompt and which prompts are tail-pruned."""

    total_budget: int
    allocations: np.ndarray
    shortest_only: np.ndarray

    def group_rollouts(self, config: DartsConfig) -> list[GroupRollout]:
        """Fresh streaming trackers, one per prompt, in batch order."""
        return [
            GroupRollout(
                allocated=int(a),
                group_size=config.group_size,
                upper=config.upper_bound,
                longest=config.longest,
                tail_pruning=config.tail_pruning,
            )
            for a in self.allocations
        ]


def plan_batch(
    length_stds: Sequence[float] | np.ndarray,
    *,
    config: DartsConfig,
    rho: float,
    cost_slope: float,
    total_budget: int | None = None,
) -> BatchPlan:
    """Budget, allocation and sampling modes for one batch of prompts.

    ``length_stds`` are the per-prompt smoothed σ̃_L; ``rho`` and ``cost_slope`` feed Eq. 9 (see
    ``LengthMomentsEMA.rho`` and ``cost.budget_cost_slope``). Pass ``total_budget`` to override the
    adaptive budget (uniform over-sampling baselines, ablations); it is clipped the same way.
    """
    stds = np.asarray(length_stds, dtype=float)
    prompts = stds.size
    low = prompts * config.lower_bound
    high = prompts * config.upper_bound
    if total_budget is None:
        budget = adaptive_total_budget(
            rho=rho,
            trade_off=config.trade_off,
            cost_slope=cost_slope,
            prompts=prompts,
            group_size=config.group_size,
        )
    else:
        budget = total_budget
    budget = int(min(max(budget, low), high))
    allocations = allocate_redundancy(
        stds, budget, lower=config.lower_bound, upper=config.upper_bound
    )
    shortest_only = (allocations >= config.upper_bound) & config.tail_pruning
    return BatchPlan(total_budget=budget, allocations=allocations, shortest_only=shortest_only)
