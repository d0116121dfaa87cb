"""Tail Batching (RollPacker, Gao et al. 2026) as darts App. H describes it.

Each short round draws ``N' = ratio·N`` fresh prompts (``M`` samples each) and ends once ``N``
groups are complete: ``T_batch = T_group,(N)``. The unfinished prompts' samples are aborted and
the prompts are deferred to a dedicated queue; whenever ``N`` have gathered they are re-computed
from scratch in one long round (all ``M`` samples, no over-provisioning). Once the fresh stream
runs out, the rest of the queue is flushed in rounds of at most ``N``. Every round is one training
step of the groups it completed, so an epoch trains every prompt once, as the other strategies do.
The round planning is :class:`workers.algorithms.darts.TailBatchingPlanner` (shared with the
GRPO lab); this module runs each round on the simulated workers.

A re-computation draws new samples (pool slots ``M .. 2M−1``: independent draws from the same
prompt); the work thrown away by the abort is counted in the round that threw it away.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from workers.algorithms.darts import TailBatchingPlanner
from workers.sim.darts.rollout import StrategyResult, simulate_batch
from workers.sim.darts.scenario import ScenarioConfig


def run_tail_batching(
    config: ScenarioConfig, pools: Sequence[np.ndarray], ratio: float
) -> list[StrategyResult]:
    """Every round of one epoch over ``pools`` (one per prompt, ``2M`` draws each)."""
    m = config.group_size
    planner: TailBatchingPlanner[int] = TailBatchingPlanner(config.prompts, ratio)
    fresh = deque(range(len(pools)))
    rounds: list[StrategyResult] = []
    while (plan := planner.next_round(fresh)) is not None:
        prompts = list(plan.prompts)
        if plan.recompute:
            batch = [pools[p][m : 2 * m] for p in prompts]
            result = simulate_batch(
                "tail_batching_long", batch, np.full(len(prompts), m), config, tail_pruning=False
            )
        else:
            batch = [pools[p][:m] for p in prompts]
            result = simulate_batch(
                "tail_batching_short",
                batch,
                np.full(len(prompts), m),
                config,
                tail_pruning=False,
                stop_after_groups=plan.stop_after_groups,
            )
        planner.round_finished(plan, result.completed.tolist())
        rounds.append(result)
    return rounds
