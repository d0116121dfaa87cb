from __future__ import annotations

import itertools

from bench import heddle_resources


def test_resources_core_shape_and_sanity() -> None:
    series = heddle_resources.run_core(prompts=2, gpus=8, profiles=["search"])
    results = series["throughput"]["search"]
    assert results["Fix-1"]["mp_degrees"] == [1] * 8
    assert results["Fix-8"]["mp_degrees"] == [8]
    assert sum(results["adaptive"]["mp_degrees"]) == 8
    assert results["adaptive_over_best_fixed"] > 0
    curves = series["active_over_time"]["search"]
    for points in curves.values():
        assert points[0] == [0.0, 32] and points[-1][1] == 0
        assert all(a[0] <= b[0] and a[1] >= b[1] for a, b in itertools.pairwise(points))
