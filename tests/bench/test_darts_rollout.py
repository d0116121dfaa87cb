"""darts_rollout's core at a tiny size: result shape and sanity, not timing."""

from __future__ import annotations

import numpy as np

from bench.darts_rollout import STRATEGIES, run_scenario, summarise, time_planning
from workers.sim.darts.scenario import ScenarioConfig


def test_scenario_series_and_summary_shape():
    config = ScenarioConfig(prompts=8, group_size=4, workers=2, max_batch=64)
    series = run_scenario(config, batches=2, seed=7)
    assert set(series) == set(STRATEGIES)
    for entry in series.values():
        assert len(entry["rollout_seconds"]) == 2
        assert len(entry["kept_lengths"]) == 2 * 8 * 4
    summary = summarise(series)
    for values in summary.values():
        assert all(np.isfinite(v) for v in values.values())
        assert values["kept_p99_length"] >= values["kept_mean_length"] > 0
    assert summary["standard"]["samples_aborted_total"] == 0


def test_planning_timer_reports_positive_times():
    timing = time_planning(prompts=16, group_size=4, repeats=3)
    assert 0 < timing["median_ms"] <= timing["p90_ms"]
