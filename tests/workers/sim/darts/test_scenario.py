"""The heavy-tailed DARTS rollout scenario on the shared LLM-worker simulation."""

from __future__ import annotations

import numpy as np
import pytest

from workers.algorithms.darts import rollout_cost
from workers.sim.darts.scenario import (
    PromptKind,
    ScenarioConfig,
    make_prompt_set,
    run_batch,
    simulate_batch,
    uniform_allocation,
)

SMALL = ScenarioConfig(prompts=8, group_size=4, workers=2, max_batch=64, max_length=4096)


def test_prompt_set_has_all_three_patterns():
    profiles = make_prompt_set(ScenarioConfig(prompts=20), np.random.default_rng(0))
    kinds = [p.kind for p in profiles]
    assert kinds.count(PromptKind.CONCISE) == 12
    assert kinds.count(PromptKind.VERBOSE_TAIL) == 6
    assert kinds.count(PromptKind.NECESSARY_TAIL) == 2


def test_draws_respect_length_limit():
    profiles = make_prompt_set(SMALL, np.random.default_rng(1))
    lengths = np.concatenate([p.draw(200, np.random.default_rng(2), 4096) for p in profiles])
    assert lengths.min() >= 1 and lengths.max() <= 4096


def test_standard_batch_waits_for_its_longest_sample():
    pools = [np.array([100, 400, 200]), np.array([50, 60, 70])]
    config = ScenarioConfig(prompts=2, group_size=3, workers=1, max_length=1000)
    result = simulate_batch("standard", pools, [3, 3], config, tail_pruning=False)
    assert result.tokens_generated == 880
    assert result.samples_aborted == 0
    assert sorted(result.kept_lengths) == [50, 60, 70, 100, 200, 400]
    # one worker, six requests decoding together: the simulated time is exactly Eq. 4's cost
    all_lengths = np.concatenate(pools)
    assert result.rollout_seconds == pytest.approx(rollout_cost(all_lengths, config.ptl), rel=1e-6)


def test_early_stop_aborts_tail_and_saves_time_and_tokens():
    pools = [np.array([10, 20, 30, 40, 3000, 4000, 5000, 6000])]
    config = ScenarioConfig(prompts=1, group_size=4, workers=1, max_length=8192)
    pruned = simulate_batch("darts", pools, [8], config, tail_pruning=True)
    full = simulate_batch("darts_no_pruning", pools, [8], config, tail_pruning=False)
    assert pruned.samples_aborted == 4
    assert sorted(pruned.kept_lengths) == [10, 20, 30, 40]
    assert sorted(full.kept_lengths) == [10, 20, 30, 6000]
    assert pruned.tokens_generated == 100 + 4 * 40
    assert pruned.rollout_seconds < full.rollout_seconds / 50


def test_uniform_allocation_spreads_budget():
    assert uniform_allocation(4, 22, upper=8).tolist() == [6, 6, 5, 5]
    assert uniform_allocation(2, 40, upper=8).tolist() == [8, 8]


def test_run_batch_compares_four_strategies_on_common_draws():
    rng = np.random.default_rng(3)
    profiles = make_prompt_set(SMALL, rng)
    comparison = run_batch(SMALL, rng, profiles)
    assert set(comparison.strategies) == {"standard", "uniform", "darts_no_pruning", "darts"}
    for result in comparison.strategies.values():
        assert len(result.kept_lengths) == SMALL.prompts * SMALL.group_size
        assert result.rollout_seconds > 0
    budget = sum(comparison.allocations)
    assert SMALL.prompts * SMALL.group_size <= budget <= 2 * SMALL.prompts * SMALL.group_size
    assert comparison.strategies["uniform"].samples_submitted == budget
    assert comparison.strategies["darts"].tokens_generated <= (
        comparison.strategies["darts_no_pruning"].tokens_generated
    )
