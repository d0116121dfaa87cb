"""darts_rollout's core at a tiny size: result shape and sanity, not timing."""

from __future__ import annotations

import numpy as np

from bench.darts_rollout import engine_block, engine_targets, run_independent, time_planning
from workers.sim.darts.scenario import ScenarioConfig

TINY = ScenarioConfig(prompts=8, group_size=4, workers=2, max_batch=64, steps=2)


def test_engine_block_reports_headline_and_budget():
    block, headline = engine_block(TINY, seed=7)
    assert block["best_tail_batching"].startswith("tail_batching@")
    assert len(block["darts_budget_per_step"]) == TINY.steps
    assert all(0.0 <= s <= 1.0 for s in block["darts_pruned_share_per_step"])
    for value in headline.values():
        assert np.isfinite(value)
    assert 1.0 <= headline["budget_multiple_mean"] <= 2.0
    assert block["summary"]["standard"]["samples_aborted_total"] == 0
    targets = engine_targets("legacy", headline)
    assert all(t.name.startswith("legacy_") for t in targets)


def test_independent_batches_keep_the_earlier_design():
    numbers = run_independent(TINY, batches=2, seed=3)
    assert numbers["standard_rollout_speedup_vs_standard"] == 1.0
    assert numbers["darts_per_step_k_rollout_seconds_total"] > 0


def test_planning_timer_reports_positive_times():
    timing = time_planning(prompts=16, group_size=4, repeats=3)
    assert 0 < timing["median_ms"] <= timing["p90_ms"]
