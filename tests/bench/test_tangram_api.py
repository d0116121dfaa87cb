"""bench/tangram_api.py at a tiny size."""

from __future__ import annotations

from bench.tangram_api import _targets, compare


def test_compare_tiny_batch() -> None:
    result = compare(batch=8)
    assert set(result) == {"quota_manager", "naive_retries", "lower_bound"}
    calls = {s["api_calls"] for s in result.values()}
    assert len(calls) == 1 and calls.pop() > 8
    managed = result["quota_manager"]
    assert managed["api_limit_violations"] == 0 and managed["api_failed_calls"] == 0
    assert managed["trajectories_with_a_failed_call"] == 0
    assert managed["api_mean_act_s"] >= result["lower_bound"]["api_mean_act_s"] - 1e-9


def test_targets_measure_failed_calls() -> None:
    rows = [{"batch": 8, "approaches": compare(batch=8)}]
    targets = {t.name: t for t in _targets(rows)}
    assert targets["quota_manager_failed_calls"].met
    # at this size nothing is refused, so the naive baseline fails nothing and the comparison
    # that needs it to is missed: the target can fail
    difference = targets["naive_minus_quota_manager_failed_calls_congested"]
    assert difference.value == 0 and not difference.met
    assert "quota_manager_over_naive_api_mean_act_b8" in targets
