"""The faults benchmark's quick core: killing the web process and restarting Redis mid-run lose
nothing and run nothing twice (real processes, servers of the test's own)."""

from __future__ import annotations

import pytest

from bench._execution import Unavailable
from bench.faults import measure

pytestmark = pytest.mark.timeout(420)


def test_web_kill_and_redis_restart_lose_and_double_nothing() -> None:
    try:
        results = measure(["web_kill", "redis_restart"], quick=True)
    except Unavailable as exc:
        pytest.skip(str(exc))
    for name, result in results.items():
        assert result["keys_accepted"] > 0, name
        assert result["lost"] == 0, (name, result)
        assert result["duplicated_runs"] == 0, (name, result)
        assert result["keys_with_two_actions"] == 0, (name, result)
        assert result["recovery_s"] is not None and result["recovery_s"] > 0, (name, result)
    assert all(kill["mid_batch"] for kill in results["web_kill"]["kills"])
