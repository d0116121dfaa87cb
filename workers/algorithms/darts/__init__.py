"""DARTS rollout shaping (darts §4, App. A–D): cost model, adaptive budget, variance-based
allocation, per-prompt variance history, dual-end sampling and tail pruning with early stop.

Pure: plain numbers and numpy arrays in, decisions out; no I/O and no clock.
"""

from workers.algorithms.darts.allocation import (
    allocate_redundancy,
    allocation_objective,
    min_max_normalise,
)
from workers.algorithms.darts.budget import (
    LengthMomentsEMA,
    adaptive_total_budget,
    calibrate_trade_off,
)
from workers.algorithms.darts.cost import (
    budget_cost_slope,
    data_parallel_cost,
    fit_ptl_curve,
    representative_lengths,
    rollout_cost,
)
from workers.algorithms.darts.moments import censored_moments, kaplan_meier_masses
from workers.algorithms.darts.planner import BatchPlan, DartsConfig, plan_batch
from workers.algorithms.darts.sampling import (
    GroupDecision,
    GroupRollout,
    SamplingMode,
    sampling_mode,
    select_training_groups,
)
from workers.algorithms.darts.tail_batching import TailBatchingPlanner, TailBatchingRound
from workers.algorithms.darts.variance_store import (
    InMemoryLengthVarianceStore,
    LengthVarianceStore,
    smoothed_stds,
)

__all__ = [
    "BatchPlan",
    "DartsConfig",
    "GroupDecision",
    "GroupRollout",
    "InMemoryLengthVarianceStore",
    "LengthMomentsEMA",
    "LengthVarianceStore",
    "SamplingMode",
    "TailBatchingPlanner",
    "TailBatchingRound",
    "adaptive_total_budget",
    "allocate_redundancy",
    "allocation_objective",
    "budget_cost_slope",
    "calibrate_trade_off",
    "censored_moments",
    "data_parallel_cost",
    "fit_ptl_curve",
    "kaplan_meier_masses",
    "min_max_normalise",
    "plan_batch",
    "representative_lengths",
    "rollout_cost",
    "sampling_mode",
    "select_training_groups",
    "smoothed_stds",
]
