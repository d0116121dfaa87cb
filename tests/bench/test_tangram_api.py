"""bench/tangram_api.py at a tiny size."""

from __future__ import annotations

from bench.tangram_api import compare


def test_compare_tiny_batch() -> None:
    result = compare(batch=8)
    assert set(result) == {"quota_manager", "naive_retries", "lower_bound"}
    calls = {s["api_calls"] for s in result.values()}
    assert len(calls) == 1 and calls.pop() > 8
    managed = result["quota_manager"]
    assert managed["api_limit_violations"] == 0 and managed["api_failed_calls"] == 0
    assert managed["api_mean_act_s"] >= result["lower_bound"]["api_mean_act_s"] - 1e-9
