"""The heavy-tailed DARTS rollout scenario on the shared LLM-worker simulation."""

from __future__ import annotations

import numpy as np
import pytest

from workers.algorithms.darts import rollout_cost
from workers.sim.darts.rollout import simulate_batch
from workers.sim.darts.scenario import (
    PromptKind,
    ScenarioConfig,
    make_prompt_set,
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


def test_tail_batching_stop_leaves_the_slowest_groups_incomplete():
    pools = [np.array([10, 10]), np.array([5000, 20]), np.array([30, 30])]
    config = ScenarioConfig(prompts=2, group_size=2, workers=1, max_length=8192)
    result = simulate_batch(
        "tail", pools, [2, 2, 2], config, tail_pruning=False, stop_after_groups=2
    )
    assert result.completed.tolist() == [True, False, True]
    assert result.samples_aborted == 1  # the 5000-token sample; its 20-token sibling finished
    assert int(result.kept.sum()) == 4
    assert result.tokens_generated < 5000


def test_per_sample_records_are_aligned():
    pools = [np.array([10, 20, 30, 40, 3000, 4000, 5000, 6000])]
    config = ScenarioConfig(prompts=1, group_size=4, workers=1, max_length=8192)
    result = simulate_batch("darts", pools, [8], config, tail_pruning=True)
    assert result.tokens.size == result.start.size == result.kept.size == 8
    assert (result.finish >= result.start).all()
    assert result.target.tolist() == pools[0].tolist()
    assert (result.tokens <= result.target).all()
    assert result.aborted.sum() == 4 and not result.streamable.any()


def test_context_engine_runs_the_same_batch():
    pools = [np.array([100, 400, 200]), np.array([50, 60, 70])]
    config = ScenarioConfig(prompts=2, group_size=3, workers=1, engine="context")
    result = simulate_batch("standard", pools, [3, 3], config, tail_pruning=False)
    assert result.tokens_generated == 880
    assert result.rollout_seconds > 0
