"""bench/tangram_cpu.py at a tiny size: every approach reports, and the figures are sane."""

from __future__ import annotations

from bench.tangram_cpu import compare


def test_compare_tiny_batch() -> None:
    result = compare(batch=6, nodes=1, cores=64)
    assert set(result) == {"elastic", "fixed_dop_4", "fixed_dop_16", "static_pods", "lower_bound"}
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
