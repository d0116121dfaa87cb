from __future__ import annotations

from bench import heddle_placement


def test_placement_core_shape_and_sanity() -> None:
    series = heddle_placement.run_core(prompts=2, gpus=2, profiles=["math"])
    results = series["math"]
    assert set(results) == {
        "heddle_dp_migration",
        "least_load",
        "cache_aware",
        "heddle_dp_migration_oracle",
    }
    tokens = {r["throughput_tokens_per_s"] * r["makespan_s"] for r in results.values()}
    assert max(tokens) - min(tokens) < 1e-6 * max(tokens)  # same work for every system
    assert all(0.0 <= r["cache_hit_rate"] <= 1.0 for r in results.values())
