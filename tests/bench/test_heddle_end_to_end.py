from __future__ import annotations

from bench import heddle_end_to_end


def test_end_to_end_core_shape_and_sanity() -> None:
    series = heddle_end_to_end.run_core(
        prompts=2, gpus=4, profiles=["coding"], engines=["context", "legacy"]
    )
    for engine in ("context", "legacy"):
        results = series[engine]["coding"]
        bound = results["lower_bound"]["throughput_tokens_per_s"]
        for name, row in results["baselines"].items():
            sweep = results["mp_sweep"][name]
            assert set(sweep) == {"1", "2", "4"}  # every degree the 4-GPU budget allows
            assert row["throughput_tokens_per_s"] == max(sweep.values())
            assert sweep[str(row["best_mp"])] == row["throughput_tokens_per_s"]
            assert row["throughput_tokens_per_s"] <= bound * 1.001
        for name in heddle_end_to_end.HEDDLES:
            assert 0 < results[name]["throughput_tokens_per_s"] <= bound * 1.001
            assert results[f"{name}_over_best_baseline"] > 0
        best = results["best_baseline"]
        assert results["baselines"][best["name"]]["best_mp"] == best["mp"]


def test_paper_batch_scenario_caps_every_degree_at_the_same_batch() -> None:
    series = heddle_end_to_end.run_paper_batch(gpus=2, profiles=["coding"])
    assert series["trajectories"] == series["prompts"] * 16
    assert series["trajectories"] <= 100 * 2
    results = series["context"]["coding"]
    for profile in results["engine_mp_profile"].values():
        assert profile["full_batch"] <= series["max_batch_per_worker"] == 100
    for name, row in results["baselines"].items():
        assert row["throughput_tokens_per_s"] == max(results["mp_sweep"][name].values())
    assert results["heddle_over_best_baseline"] > 0
