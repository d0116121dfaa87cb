from __future__ import annotations

from bench import heddle_scheduling


def test_scheduling_core_shape_and_sanity() -> None:
    series = heddle_scheduling.run_core(prompts=2, gpus=1, max_batch_per_gpu=4, profiles=["coding"])
    assert set(series["scheduling"]) == {"pps", "fcfs", "round_robin", "shortest_first"}
    for result in series["scheduling"].values():
        assert result["makespan_s"] > 0 and result["longest_trajectory_queueing_s"] >= 0
    assert series["scheduling"]["fcfs"]["preemptions"] == 0
    quality = series["prediction"]["coding"]
    assert set(quality) == {"prompt_only", "heddle_1", "heddle_2"}
    for metrics in quality.values():
        assert 0.0 <= metrics["recall_top"] <= 1.0 and -1.0 <= metrics["pearson_r"] <= 1.0
