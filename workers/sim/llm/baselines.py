"""The systems Heddle is compared with (heddle §7 "Baselines", §7.2–§7.4), and the lower bound.

- ``verl``: step-centric round-robin scheduling, static cache-affinity placement (each trajectory
  pinned to one worker), homogeneous MP.
- ``verl*``: verl plus the SGLang router: least-load when the load skew passes the thresholds,
  else cache-aware.
- ``slime``: least in-flight routing of every step, round-robin scheduling.
- ``Fix-1`` / ``Fix-8``: Heddle's scheduling and placement with homogeneous MP 1 or 8 (§7.4).
- ``heddle``: PPS + presorted DP + migration + annealed heterogeneous MP.
- lower bound: every trajectory alone on the fastest worker — no queueing, no interference,
  best MP, only incremental prefill.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from workers.algorithms.heddle.latency_model import MP_DEGREES, MPLatencyModel
from workers.algorithms.heddle.prediction import TrajectoryContext, TrajectoryRecord
from workers.algorithms.heddle.priority import PriorityPolicy
from workers.sim.llm.rollout import PlacementPolicy, SystemConfig


def verl(mp: int = 1) -> SystemConfig:
    return SystemConfig(
        "verl", PriorityPolicy.ROUND_ROBIN, PlacementPolicy.STATIC_AFFINITY, mp_degree=mp
    )


def verl_star(mp: int = 1) -> SystemConfig:
    return SystemConfig(
        "verl*", PriorityPolicy.ROUND_ROBIN, PlacementPolicy.LOAD_THRESHOLD, mp_degree=mp
    )


def slime(mp: int = 1) -> SystemConfig:
    return SystemConfig(
        "slime", PriorityPolicy.ROUND_ROBIN, PlacementPolicy.LEAST_INFLIGHT, mp_degree=mp
    )


def heddle(mp_degree: int | None = None, name: str = "heddle") -> SystemConfig:
    """All of Heddle; ``mp_degree`` set gives the Fix-m ablations."""
    return SystemConfig(
        name, PriorityPolicy.PPS, PlacementPolicy.HEDDLE_DP, mp_degree=mp_degree, migration=True
    )


def fixed_mp(mp: int) -> SystemConfig:
    return heddle(mp_degree=mp, name=f"Fix-{mp}")


def lower_bound_makespan(
    records: Sequence[TrajectoryRecord],
    model: MPLatencyModel,
    degrees: Sequence[int] = MP_DEGREES,
) -> float:
    """No queueing, no interference (batch 1), the best MP: max over trajectories of
    Σ steps (prefill of the new context + tokens · τ(m)) + tool time."""
    best = max(degrees)
    tau = model.tau(best)
    worst = 0.0
    for record in records:
        elapsed = model.prefill_seconds(record.prompt_tokens, best)
        for step in record.steps:
            elapsed += step.output_tokens * tau + step.tool_seconds
            elapsed += model.prefill_seconds(step.tool_output_tokens, best)
        worst = max(worst, elapsed)
    return worst


class OraclePredictor:
    """Knows every trajectory's true total (an upper bound on prediction, for ablations)."""

    def __init__(self, records: Sequence[TrajectoryRecord]) -> None:
        self._totals = {r.trajectory_id: r.total_tokens for r in records}

    def predict(self, context: TrajectoryContext) -> float:
        if context.trajectory_id not in self._totals:
            raise KeyError(f"oracle has no trajectory {context.trajectory_id!r}")
        return float(max(self._totals[context.trajectory_id] - context.tokens_so_far, 1))

    def predict_many(self, contexts: Sequence[TrajectoryContext]) -> np.ndarray:
        return np.asarray([self.predict(c) for c in contexts], dtype=float)
