"""Tail Batching (RollPacker, Gao et al. 2026) as darts App. H describes it.

Each short round draws ``N' = ratio·N`` fresh prompts (``M`` samples each) and ends once ``N``
groups are complete: ``T_batch = T_group,(N)``. The unfinished prompts' samples are aborted and
the prompts are deferred to a dedicated queue; whenever ``N`` have gathered they are re-computed
from scratch in one long round (all ``M`` samples, no over-provisioning). Once the fresh stream
runs out, the rest of the queue is flushed in rounds of at most ``N``. Every round is one training
step of the groups it completed, so an epoch trains every prompt once, as the other strategies do.

A re-computation draws new samples (pool slots ``M .. 2M−1``: independent draws from the same
prompt); the work thrown away by the abort is counted in the round that threw it away.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from workers.sim.darts.rollout import StrategyResult, simulate_batch
from workers.sim.darts.scenario import ScenarioConfig


def run_tail_batching(
    config: ScenarioConfig, pools: Sequence[np.ndarray], ratio: float
) -> list[StrategyResult]:
    """Every round of one epoch over ``pools`` (one per prompt, ``2M`` draws each)."""
    n, m = config.prompts, config.group_size
    if ratio < 1.0:
        raise ValueError("Tail Batching over-provisions: ratio must be at least 1")
    wide = max(n, round(ratio * n))
    fresh = deque(range(len(pools)))
    deferred: list[int] = []
    rounds: list[StrategyResult] = []

    def long_round(prompts: list[int]) -> None:
        batch = [pools[p][m : 2 * m] for p in prompts]
        rounds.append(
            simulate_batch(
                "tail_batching_long", batch, np.full(len(prompts), m), config, tail_pruning=False
            )
        )

    while fresh:
        prompts = [fresh.popleft() for _ in range(min(wide, len(fresh)))]
        batch = [pools[p][:m] for p in prompts]
        stop = n if len(prompts) > n else None
        result = simulate_batch(
            "tail_batching_short",
            batch,
            np.full(len(prompts), m),
            config,
            tail_pruning=False,
            stop_after_groups=stop,
        )
        rounds.append(result)
        deferred.extend(p for p, done in zip(prompts, result.completed, strict=True) if not done)
        while len(deferred) >= n:
            long_round(deferred[:n])
            deferred = deferred[n:]
    while deferred:
        long_round(deferred[:n])
        deferred = deferred[n:]
    return rounds
