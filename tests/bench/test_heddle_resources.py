from __future__ import annotations

import itertools

from bench import heddle_resources


def test_resources_core_shape_and_sanity() -> None:
    series = heddle_resources.run_core(
        prompts=2, gpus=8, profiles=["search"], engines=["context", "legacy"]
    )
    for engine in ("context", "legacy"):
        results = series[engine]["throughput"]["search"]
        assert results["Fix-1"]["mp_degrees"] == [1] * 8
        assert results["Fix-8"]["mp_degrees"] == [8]
        assert sum(results["adaptive"]["mp_degrees"]) == 8
        fixed = max(results[f"Fix-{m}"]["throughput_tokens_per_s"] for m in (1, 2, 4, 8))
        ratio = results["adaptive"]["throughput_tokens_per_s"] / fixed
        assert results["adaptive_over_best_fixed"] == ratio
        curves = series[engine]["active_over_time"]["search"]
        for points in curves.values():
            assert points[0] == [0.0, 32] and points[-1][1] == 0
            assert all(a[0] <= b[0] and a[1] >= b[1] for a, b in itertools.pairwise(points))
