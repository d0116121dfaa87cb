"""The systems Heddle is compared with (heddle §7 "Baselines", §7.2–§7.4), and the lower bound.

- ``verl``: step-centric round-robin scheduling, static cache-affinity placement (each trajectory
  pinned to one worker, §7 "Baselines"), homogeneous MP.
- ``verl*``: verl plus the SGLang router: "if the load skew (max/min) exceeds a threshold (e.g.,
  32), it uses least-load strategy; otherwise, it defaults to a cache-aware strategy" (§7) — the
  router's cache-aware policy with ``balance_rel_threshold`` 32 and no absolute threshold.
- ``slime``: the SGLang router as slime starts it (``balance_abs_threshold=0``, the router's
  default relative threshold 1.5 and cache threshold 0.3), round-robin scheduling.
- ``Fix-1`` / ``Fix-8``: Heddle's scheduling and placement with homogeneous MP 1 or 8 (§7.4).
- ``heddle``: PPS + presorted DP + migration + annealed heterogeneous MP.
- lower bound: every trajectory alone on the fastest worker — no queueing, no interference,
  best MP, only incremental prefill.

The baselines take their MP degree; the benchmarks sweep it and keep each baseline's best
(§7.1 runs them "to ensure maximum throughput").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from workers.algorithms.heddle.latency_model import MP_DEGREES, MPLatencyModel
from workers.algorithms.heddle.prediction import TrajectoryContext, TrajectoryRecord
from workers.algorithms.heddle.priority import PriorityPolicy
from workers.sim.llm.latency import ContextLatencyModel
from workers.sim.llm.routing import SGL_ROUTER_BALANCE_REL, CacheAwareConfig
from workers.sim.llm.systems import PlacementPolicy, SystemConfig
from workers.sim.llm.timeline import context_decode_alone_seconds, context_prefill_alone_seconds

SLIME_ROUTER = CacheAwareConfig(
    balance_abs_threshold=0, balance_rel_threshold=SGL_ROUTER_BALANCE_REL
)
VERL_STAR_ROUTER = CacheAwareConfig(balance_abs_threshold=0, balance_rel_threshold=32.0)


def verl(mp: int = 1) -> SystemConfig:
    return SystemConfig(
        "verl", PriorityPolicy.ROUND_ROBIN, PlacementPolicy.STATIC_AFFINITY, mp_degree=mp
    )


def verl_star(mp: int = 1) -> SystemConfig:
    return SystemConfig(
        "verl*",
        PriorityPolicy.ROUND_ROBIN,
        PlacementPolicy.SGLANG_ROUTER,
        mp_degree=mp,
        router=VERL_STAR_ROUTER,
    )


def slime(mp: int = 1) -> SystemConfig:
    return SystemConfig(
        "slime",
        PriorityPolicy.ROUND_ROBIN,
        PlacementPolicy.SGLANG_ROUTER,
        mp_degree=mp,
        router=SLIME_ROUTER,
    )


BASELINES = {"verl": verl, "verl*": verl_star, "slime": slime}


def heddle(
    mp_degree: int | None = None,
    name: str = "heddle",
    per_degree_profile: bool = True,
    context_aware_planner: bool = True,
    priority: PriorityPolicy = PriorityPolicy.PPS,
) -> SystemConfig:
    """All of Heddle; ``mp_degree`` set gives the Fix-m ablations; ``priority`` the PPS key."""
    return SystemConfig(
        name,
        priority,
        PlacementPolicy.HEDDLE_DP,
        mp_degree=mp_degree,
        migration=True,
        per_degree_profile=per_degree_profile,
        context_aware_planner=context_aware_planner,
    )


def fixed_mp(mp: int) -> SystemConfig:
    return heddle(mp_degree=mp, name=f"Fix-{mp}")


def lower_bound_makespan(
    records: Sequence[TrajectoryRecord],
    model: MPLatencyModel,
    degrees: Sequence[int] = MP_DEGREES,
) -> float:
    """Legacy model: no queueing, no interference (batch 1), the best MP: max over trajectories
    of Σ steps (prefill of the new context + tokens · τ(m)) + the tool calls between steps (a
    trajectory ends with its last generation: the rollout runs no tool after it)."""
    best = max(degrees)
    tau = model.tau(best)
    worst = 0.0
    for record in records:
        elapsed = model.prefill_seconds(record.prompt_tokens, best)
        for step in record.steps:
            elapsed += step.output_tokens * tau
        for step in record.steps[:-1]:
            elapsed += step.tool_seconds + model.prefill_seconds(step.tool_output_tokens, best)
        worst = max(worst, elapsed)
    return worst


def context_lower_bound_makespan(
    records: Sequence[TrajectoryRecord],
    model: ContextLatencyModel,
    degrees: Sequence[int] = MP_DEGREES,
) -> float:
    """Context model: each trajectory alone (batch of one, its own context only), every prefill
    and decode phase on the MP degree fastest for it, the tool calls between steps added (none
    after the last step: the rollout ends a trajectory with its last generation)."""
    prefill, decode = context_prefill_alone_seconds, context_decode_alone_seconds
    worst = 0.0
    for record in records:
        context = 0.0
        elapsed = 0.0
        new = float(record.prompt_tokens)
        last = len(record.steps) - 1
        for index, step in enumerate(record.steps):
            elapsed += min(prefill(model, new, context, m) for m in degrees)
            context += new
            elapsed += min(decode(model, step.output_tokens, context, m) for m in degrees)
            if index < last:
                elapsed += step.tool_seconds
            context += step.output_tokens
            new = float(step.tool_output_tokens)
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
