"""bench/tangram_gpu.py at a tiny size."""

from __future__ import annotations

from bench.tangram_gpu import compare, gpus_for_same_act


def test_compare_tiny_batch() -> None:
    result = compare(batch=24)
    assert set(result) == {"tangram", "isolated_sglang", "serverless_llm", "lower_bound"}
    bound = result["lower_bound"]["mean_act_s"]
    assert all(s["mean_act_s"] >= bound - 1e-9 for s in result.values())
    assert result["tangram"]["service_loads"] > 0


def test_gpu_sweep_stops_at_the_first_pool_that_matches() -> None:
    saving = gpus_for_same_act(batch=24)
    assert saving["isolated_gpus"] == 40
    sweep = saving["tangram_sweep"]
    assert [s["gpus"] for s in sweep] == [8 * (i + 1) for i in range(len(sweep))]
    if saving["tangram_gpus_needed"] is not None:
        assert sweep[-1]["mean_act_s"] <= saving["isolated_mean_act_s"]
        assert saving["fraction"] == saving["tangram_gpus_needed"] / 40
