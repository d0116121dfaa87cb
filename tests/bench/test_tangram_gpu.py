"""bench/tangram_gpu.py at a tiny size."""

from __future__ import annotations

from bench.tangram_gpu import _targets, compare, gpus_for_same_act
from workers.sim.tangram.workloads import MOPD_ORIGINAL


def test_compare_tiny_batch() -> None:
    result = compare(batch=24)
    approaches = {
        "tangram",
        "tangram_fixed_dop",
        "isolated_sglang",
        "serverless_llm",
        "serverless_llm_ssd",
        "serverless_llm_earlier_setting",
        "lower_bound",
    }
    assert approaches <= set(result)
    bound = result["lower_bound"]["mean_act_s"]
    assert all(result[a]["mean_act_s"] >= bound - 1e-9 for a in approaches)
    assert result["tangram"]["service_loads"] > 0
    # each baseline is its best configuration, and every configuration is reported
    for name in ("isolated_sglang", "serverless_llm", "tangram_fixed_dop"):
        configs = result["configs"][name]
        assert result[name]["mean_act_s"] == min(c["mean_act_s"] for c in configs.values())
        assert result[name]["config"] in configs
    assert set(result["configs"]["serverless_llm"]) == {"dop1", "dop2", "dop4", "dop8"}


def test_gpu_sweep_runs_every_pool_size() -> None:
    saving = gpus_for_same_act(batch=24, params=MOPD_ORIGINAL, step=3)
    assert saving["isolated_gpus"] == 40
    sweep = saving["tangram_sweep"]
    assert [s["gpus"] for s in sweep] == list(range(2, 41, 3))  # 120 GB teachers need 2 GPUs
    needed, bar = saving["tangram_gpus_needed"], saving["isolated_mean_act_s"]
    if needed is not None:
        assert all(s["mean_act_s"] <= bar for s in sweep if s["gpus"] >= needed)
        below = [s for s in sweep if s["gpus"] < needed]
        assert not below or below[-1]["mean_act_s"] > bar
        assert saving["first_matching_gpus"] <= needed
        assert saving["fraction"] == needed / 40


def test_targets_cover_every_batch_and_both_workloads() -> None:
    small = compare(batch=8)
    rows = [{"batch": b, "approaches": small} for b in (8, 4096)]  # 4096: the congested batch
    saving = {"fraction": 0.3}
    workloads = {
        "mopd_5x2": {"by_batch": rows, "gpus_for_same_act": saving},
        "mopd_3x4_original": {"by_batch": rows, "gpus_for_same_act": saving},
    }
    names = {t.name for t in _targets(workloads)}
    assert "tangram_gpu_fraction_for_same_act_mopd_3x4_original" in names
    assert "congested_tangram_queue_over_execution" in names
    for batch in (8, 4096):
        assert f"tangram_over_serverless_llm_mean_act_b{batch}" in names
        assert f"tangram_over_tangram_fixed_dop_mean_act_b{batch}" in names


def test_heavy_congested_point_adds_its_targets_beside_the_first() -> None:
    small = compare(batch=8)
    rows = [{"batch": b, "approaches": small} for b in (8, 4096)]
    saving = {"fraction": 0.3}
    current = {
        "by_batch": rows,
        "gpus_for_same_act": saving,
        "heavy_congested": {"batch": 8192, "approaches": small},
    }
    workloads = {
        "mopd_5x2": current,
        "mopd_3x4_original": {"by_batch": rows, "gpus_for_same_act": saving},
    }
    targets = {t.name: t for t in _targets(workloads)}
    # the first congested point's check stays, the heavier point's joins it
    assert "congested_tangram_queue_over_execution" in targets
    heavy = targets["congested_tangram_queue_over_execution_b8192"]
    tangram = small["tangram"]
    assert heavy.value == tangram["mean_queue_s"] / tangram["mean_execution_s"]
    assert "isolated_over_tangram_mean_act_congested_b8192" in targets
    assert "tangram_over_tangram_fixed_dop_mean_act_b8192" in targets
