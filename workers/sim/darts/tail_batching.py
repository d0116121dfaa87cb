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

``response_ratio`` > 1 is RollPacker's own short round (its released configuration: 1.25): each
prompt draws ``round(response_ratio·M)`` candidates (pool slots from 0) and its group completes at
its first ``M`` valid finished samples, aborting the rest — :class:`GroupRollout`'s early stop,
so a sample stopped at the length limit does not count towards the ``M`` (RollPacker counts any
finished response; the difference only touches groups with length-capped samples). Its
re-computations then draw from ``recompute_pools`` (fresh draws), since the short round may have
used slots ``M`` and beyond.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from workers.algorithms.darts import TailBatchingPlanner
from workers.sim.darts.rollout import StrategyResult, simulate_batch
from workers.sim.darts.scenario import ScenarioConfig


def run_tail_batching(
    config: ScenarioConfig,
    pools: Sequence[np.ndarray],
    ratio: float,
    *,
    response_ratio: float = 1.0,
    recompute_pools: Sequence[np.ndarray] | None = None,
) -> list[StrategyResult]:
    """Every round of one epoch over ``pools`` (one per prompt, ``2M`` draws each);
    ``recompute_pools`` (``M`` draws per prompt) are needed when ``response_ratio`` > 1."""
    m = config.group_size
    planner: TailBatchingPlanner[int] = TailBatchingPlanner(
        config.prompts, ratio, group_size=m, response_ratio=response_ratio
    )
    if planner.short_samples is not None and planner.short_samples > m:
        if recompute_pools is None:
            raise ValueError("response over-provisioning needs fresh re-computation draws")
        if planner.short_samples > min(len(p) for p in pools):
            raise ValueError("the pools hold fewer draws than a short round's candidates")
    fresh = deque(range(len(pools)))
    rounds: list[StrategyResult] = []
    while (plan := planner.next_round(fresh)) is not None:
        prompts = list(plan.prompts)
        samples = m if plan.samples_per_prompt is None else plan.samples_per_prompt
        if plan.recompute:
            if recompute_pools is None or response_ratio == 1.0:
                batch = [pools[p][m : 2 * m] for p in prompts]
            else:
                batch = [recompute_pools[p][:m] for p in prompts]
            result = simulate_batch(
                "tail_batching_long", batch, np.full(len(prompts), m), config, tail_pruning=False
            )
        else:
            batch = [pools[p][:samples] for p in prompts]
            result = simulate_batch(
                "tail_batching_short",
                batch,
                np.full(len(prompts), samples),
                config,
                tail_pruning=samples > m,
                stop_after_groups=plan.stop_after_groups,
                prune_at=samples,
            )
        planner.round_finished(plan, result.completed.tolist())
        rounds.append(result)
    return rounds
