"""bench/scheduler_pass.py at a tiny size: shape and sanity, not timing."""

from __future__ import annotations

from bench.scheduler_pass import POOLS, cold_bursts, measure


def test_measure_reports_every_figure_for_each_pool() -> None:
    for pool in POOLS:
        row = measure(pool, queue=16, passes=15)
        assert row["pool"] == pool and row["passes"] == 15
        assert 0 < row["p50_ms"] <= row["p99_ms"] <= row["max_ms"]
        assert row["cpu_p99_ms"] > 0
        assert row["actions_started_per_pass"] > 0  # the steady state really schedules
        assert row["running_at_end"] > 0
        assert 0 <= row["eviction_trials_p50"] <= row["eviction_trials_p99"]
        assert row["eviction_trials_slowest_1pct_mean"] >= 0


def test_a_capped_cold_burst_is_timed_until_placed() -> None:
    capped = cold_bursts("cpu-32", queue=40, bursts=2, cap=4)
    assert capped["candidate_cap"] == 4 and capped["passes_p50"] > 1
    assert 0 < capped["p50_ms"] <= capped["placed_p50_ms"]
    whole = cold_bursts("cpu-32", queue=40, bursts=2, cap=None, rest_model="minimum")
    assert whole["passes_p50"] == 1 and whole["started_p50"] > 0
