"""The soak benchmark at a tiny size: real processes, the result's shape, and nothing lost."""

from __future__ import annotations

import pytest

from bench._execution import Unavailable
from bench.soak import Shape, measure

pytestmark = pytest.mark.timeout(180)


def test_a_short_soak_loses_nothing_and_reports_every_figure() -> None:
    shape = Shape(rate=100, duration_s=15, window_s=5, sample_every_s=1, drain_s=20)
    try:
        result = measure(shape)
    except Unavailable as exc:
        pytest.skip(str(exc))
    assert result["offered"] == 1500 and result["batch_size"] == 5
    assert result["accepted"] + result["batches_skipped"] * 5 == 1500
    assert result["lost"] == 0 and result["unseen_by_client"] == 0
    assert result["client_statuses"] == {"succeeded": result["accepted"]}
    assert result["database_statuses"] == {"succeeded": result["accepted"] + 10}  # + warm-up
    assert [w["from_s"] for w in result["windows"]] == [0, 5, 10]
    assert all(w["submit_to_end"]["p99_ms"] > 0 for w in result["windows"])
    processes = result["loom_processes"]
    assert processes[:2] == ["web", "scheduler"] and len(processes) == 4  # and two agents
    for name in [*processes, "loadgen", "postgres"]:
        assert result["rss"][name]["second_window_median"] > 0, name
        assert result["rss"][name]["ratio"] > 0, name
    assert set(result["cores_busy"]) == {*processes, "loadgen", "postgres", "machine"}
    assert result["bottleneck"]["busiest_process"] in [*processes, "loadgen"]
    assert result["redis_streams"]["entries"]["last_window_median"] > 0
    assert len(result["timeline"]["p99_ms"]) == 36  # window / 12 per bucket
