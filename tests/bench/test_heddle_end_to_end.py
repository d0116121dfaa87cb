from __future__ import annotations

from bench import heddle_end_to_end


def test_end_to_end_core_shape_and_sanity() -> None:
    series = heddle_end_to_end.run_core(prompts=2, gpus=4, profiles=["coding"])
    results = series["coding"]
    for name in ("verl", "verl*", "slime", "heddle", "lower_bound"):
        assert results[name]["throughput_tokens_per_s"] > 0
    bound = results["lower_bound"]["throughput_tokens_per_s"]
    for name in ("verl", "verl*", "slime", "heddle"):
        assert results[name]["throughput_tokens_per_s"] <= bound * 1.001
    assert results["heddle_over_best_baseline"] > 0
