from __future__ import annotations

from bench import heddle_overhead


def test_overhead_core_shape_and_sanity() -> None:
    series = heddle_overhead.run_core(trajectories=160, workers=8, gpus=8, repeats=1)
    assert series["trajectories"] == 160
    for key in ("dp_paper_items256", "dp_fluid_items256", "dp_paper_items_all"):
        assert series[key]["seconds"] > 0 and series[key]["makespan"] > 0
    # aggregation can only coarsen the split points: never a better makespan than the exact DP
    assert (
        series["dp_paper_items256"]["makespan"] >= series["dp_paper_items_all"]["makespan"] - 1e-9
    )
    assert sum(series["sa"]["degrees"]) == 8
