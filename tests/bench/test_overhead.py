"""The overhead benchmark's core at a tiny size: every mode runs end to end (shape, not timing)."""

from __future__ import annotations

import pytest

from bench._execution import Unavailable
from bench.overhead import measure

pytestmark = pytest.mark.timeout(180)


def test_every_mode_measures_noop_round_trips() -> None:
    sizes = {
        "celery": 5,
        "rest": 5,
        "healthz": 10,
        "single": [(2, 4)],
        "batch": [(1, 2), (10, 1)],
        "throughput": 200,
    }
    try:
        result = measure(sizes)
    except Unavailable as exc:
        pytest.skip(str(exc))
    assert result["celery"]["n"] == 5 and result["celery"]["p50_ms"] > 0
    assert result["durable_commit"]["n"] == 5 and result["durable_commit"]["p50_ms"] > 0
    for form in ("rest_run@1", "rest_two@1", "sdk_run@1", "single@1"):
        assert result[form]["n"] == 5 and result[form]["p50_ms"] > 0, form
    for name in ("single@2_uncoalesced", "single@2_coalesced"):
        assert result[name]["n"] == 4 and result[name]["actions_per_s"] > 0, name
    # One request per call vs shared ones: 2 per action (submit, result) only when uncoalesced.
    assert result["single@2_uncoalesced"]["requests_per_action"] == 2
    floor = result["web_floor_healthz"]
    assert floor["bridge"]["n"] == 10 and floor["django_asgi_handler"]["n"] == 10
    assert set(result["single@1_legs"]) == {
        "submit_request",
        "result_request",
        "submitted_to_scheduled",
        "scheduled_to_started",
    }
    assert result["batch@10"]["latency"]["n"] == 10
    assert result["batch@10"]["amortised"]["p50_ms"] > 0
    assert result["throughput"]["succeeded"] == 200
