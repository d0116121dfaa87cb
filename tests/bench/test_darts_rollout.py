"""darts_rollout's core at a tiny size: result shape and sanity, not timing."""

from __future__ import annotations

from dataclasses import replace

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


def test_budget_sweep_and_saturation_by_kind_are_reported():
    block, headline = engine_block(replace(TINY, fixed_budget_multiples=(1.0, 2.0)), seed=7)
    sweep = block["budget_sweep"]
    assert set(sweep) == {"darts_fixed@1", "darts_fixed@2"}
    assert sweep["darts_fixed@1"]["pruned_prompt_share"] == 0.0
    assert sweep["darts_fixed@2"]["budget_multiple"] == 2.0
    assert all("necessary_tail_kept_length_vs_standard" in arm for arm in sweep.values())
    assert all("step_speedup_vs_best_tail_batching" in arm for arm in sweep.values())
    by_kind = block["darts_saturated_share_by_kind"]
    assert sum(k["prompts"] for k in by_kind.values()) == TINY.prompts * TINY.steps
    assert all(0.0 <= k["saturated_share"] <= 1.0 for k in by_kind.values())
    assert 0.0 <= headline["heavy_prompt_share"] <= 1.0


def test_saturation_by_sigma_shape_covers_each_shape_and_budget():
    from bench.darts_rollout import SWEEP_MULTIPLES, saturation_by_sigma_shape

    table = saturation_by_sigma_shape(TINY, repeats=2, seed=1)
    assert "this_workload" in table and "normal_cv_0.3" in table
    for row in table.values():
        assert set(row) == {f"{m:g}" for m in SWEEP_MULTIPLES}
        assert all(0.0 <= share <= 1.0 for share in row.values())
        assert row["2"] == 1.0  # at 2·N·M every prompt is at M_up


def test_length_scale_needed_is_one_when_met_and_shrinks_for_a_tighter_time():
    from bench.darts_rollout import length_scale_needed, run_engine

    series, _ = run_engine(TINY, seed=7, strategies=("darts",))
    seconds = float(np.sum(series.step_seconds["darts"]))
    assert length_scale_needed(TINY, 7, seconds * 2.0) == 1.0
    scale = length_scale_needed(TINY, 7, seconds * 0.7, iterations=4)
    assert 0.1 <= scale < 1.0
    shrunk, _ = run_engine(TINY, seed=7, length_scale=scale, strategies=("darts",))
    assert float(np.sum(shrunk.step_seconds["darts"])) <= seconds * 0.7
