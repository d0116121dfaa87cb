"""bench/tangram_cpu.py at a tiny size: every approach reports, the figures are sane, the sweep's
grid holds the original calibration and the regime, and the summaries read the points right."""

from __future__ import annotations

import pytest

from bench._tangram_cpu_pods import EQUAL_EXEC, LEGACY, sensitivity, summarise_sensitivity
from bench._tangram_cpu_sim import AOE_OVERHEAD_S, FIXED_DOPS, scaled_to
from bench._tangram_cpu_sweep import (
    REWARD_HEAVY,
    SweepPoint,
    grid,
    grid_params,
    run_point,
    summarise,
)
from bench.tangram_cpu import compare
from workers.sim.tangram.workloads import AiCodingParams, ai_coding_trace


def test_compare_tiny_batch() -> None:
    result = compare(batch=6, nodes=1, cores=64)
    assert set(result) == {
        "elastic",
        "elastic_paper_estimate",
        *(f"fixed_dop_{d}" for d in FIXED_DOPS),
        "static_pods",
        "static_pods_equal_exec",
        "lower_bound",
    }
    actions = {s["actions"] for s in result.values()}
    assert len(actions) == 1 and actions.pop() > 6  # same trace, every action recorded
    bound = result["lower_bound"]["mean_act_s"]
    for name, summary in result.items():
        assert summary["mean_act_s"] >= bound - 1e-9, name
        assert summary["failed"] == 0
    assert (
        result["elastic"]["mean_act_by_kind_s"]["reward"]
        < (result["fixed_dop_4"]["mean_act_by_kind_s"]["reward"])
    )


def test_static_settings_differ_only_where_documented() -> None:
    assert LEGACY.exec_overhead_s == 0.1 and LEGACY.pods_burst == 1
    assert EQUAL_EXEC.exec_overhead_s == AOE_OVERHEAD_S
    assert (EQUAL_EXEC.pod_start_s, EQUAL_EXEC.pods_per_second) == (2.0, 50.0)
    one_node = scaled_to(EQUAL_EXEC, 1)
    assert one_node.pods_per_second == pytest.approx(10.0) and one_node.pods_burst == 20


def test_sensitivity_rows_compare_with_the_given_elastic() -> None:
    rows = sensitivity(ai_coding_trace(4, seed=1), nodes=1, cores=64, elastic_mean_act_s=2.0)
    names = [r["setting"] for r in rows]
    assert names[0] == "legacy" and "equal_exec" in names and len(set(names)) == len(names)
    for row in rows:
        assert row["static_over_elastic_mean_act"] == pytest.approx(row["mean_act_s"] / 2.0)
    starts = {r["pod_params"]["pod_start_s"] for r in rows}
    assert {0.0, 2.0} <= starts
    summary = summarise_sensitivity(rows)
    lowest = min(r["static_over_elastic_mean_act"] for r in rows)
    assert summary["best_for_static_static_over_elastic"] == lowest
    assert summary["equal_exec_static_over_elastic"] <= summary["legacy_static_over_elastic"]


def test_grid_holds_the_original_calibration_once_and_the_regime() -> None:
    for quick in (False, True):
        points = grid(quick)
        assert sum(p.original for p in points) == 1
        assert any(p.reward_heavy for p in points) and not all(p.reward_heavy for p in points)
        assert len(set(points)) == len(points) == grid_params(quick)["points"]
    assert set(grid(True)) <= set(grid(False))
    original = next(p for p in grid(False) if p.original)
    assert original.params() == AiCodingParams()


def test_run_point_picks_the_best_fixed_dop() -> None:
    point = SweepPoint(REWARD_HEAVY, 15.0, "synchronized")
    row = run_point(point, batch=8, nodes=1, cores=32)
    fixed = {d: row["approaches"][f"fixed_dop_{d}"]["mean_act_s"] for d in FIXED_DOPS}
    assert row["best_fixed_mean_act_s"] == min(fixed.values())
    assert fixed[row["best_fixed_dop"]] == row["best_fixed_mean_act_s"]
    elastic = row["approaches"]["elastic"]["mean_act_s"]
    assert row["best_fixed_over_elastic"] == pytest.approx(row["best_fixed_mean_act_s"] / elastic)
    paper = row["approaches"]["elastic_paper_estimate"]["mean_act_s"]
    assert row["best_fixed_over_elastic_paper_estimate"] == pytest.approx(
        row["best_fixed_mean_act_s"] / paper
    )
    assert row["headroom_best_fixed_over_lower_bound"] >= 1.0 - 1e-9
    assert row["trace"]["reward_action_share"] >= 1 / 3  # 0-2 env turns before each reward
    assert row["reward_heavy_regime"] and not row["original_calibration"]


def test_summarise_reads_the_regime_and_the_worst_point() -> None:
    def point(share: str, median: float, gain: float, dop: int) -> dict[str, object]:
        return {
            "best_fixed_over_elastic_paper_estimate": 1.0,
            "reward_share": share,
            "reward_median_s": median,
            "burstiness": "synchronized",
            "reward_heavy_regime": share == REWARD_HEAVY,
            "best_fixed_over_elastic": gain,
            "headroom_best_fixed_over_lower_bound": 2.0,
            "best_fixed_dop": dop,
        }

    points = [
        point(REWARD_HEAVY, 30.0, 2.0, 4),
        point(REWARD_HEAVY, 60.0, 0.5, 8),
        point("env_heavy", 30.0, 0.9, 16),
        point("env_heavy", 60.0, 1.1, 16),
    ]
    summary = summarise(points)
    assert summary["reward_heavy_geomean_best_fixed_over_elastic"] == pytest.approx(1.0)
    assert summary["reward_heavy_min_best_fixed_over_elastic"] == 0.5
    assert summary["all_points_min_best_fixed_over_elastic"] == 0.5
    assert summary["worst_point"]["reward_median_s"] == 60.0
    assert summary["points_elastic_ahead"] == 2 and summary["points_elastic_below_0_95"] == 2
    assert summary["best_fixed_dop_counts"] == {"4": 1, "8": 1, "16": 2, "32": 0}
    assert summary["all_points_geomean_best_fixed_over_elastic"] == pytest.approx(0.99**0.25)
    paper = summary["paper_estimate"]
    assert paper["reward_heavy_geomean_best_fixed_over_elastic"] == pytest.approx(1.0)
    assert paper["points_elastic_ahead"] == 0 and paper["points_default_estimate_better"] == 2
