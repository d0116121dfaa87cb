from __future__ import annotations

from bench import heddle_scheduling


def test_scheduling_core_shape_and_sanity() -> None:
    series = heddle_scheduling.run_core(
        prompts=2, gpus=1, max_batch_per_gpu=4, profiles=["coding"], engines=["context"]
    )
    sched = series["scheduling"]["context"]
    assert {"pps", "fcfs", "round_robin", "shortest_first"} <= set(sched)
    for name in ("pps", *heddle_scheduling.OTHERS):
        assert sched[name]["makespan_s"] > 0 and sched[name]["longest_trajectory_queueing_s"] >= 0
    assert sched["fcfs"]["preemptions"] == 0
    best_other = max(sched[n]["throughput_tokens_per_s"] for n in heddle_scheduling.OTHERS)
    assert sched["pps_over_best_other"] == sched["pps"]["throughput_tokens_per_s"] / best_other
    assert sched["pps_remaining_over_best_other"] == (
        sched["pps_remaining"]["throughput_tokens_per_s"] / best_other
    )
    for version in ("generator_v2", "generator_v1"):
        quality = series["prediction"][version]["coding"]
        assert set(quality) == {"prompt_only", "heddle_1", "heddle_2"}
        for metrics in quality.values():
            assert 0.0 <= metrics["recall_top"] <= 1.0 and -1.0 <= metrics["pearson_r"] <= 1.0
