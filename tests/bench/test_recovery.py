"""The recovery benchmark's core at a tiny size: shape and sanity, not timing."""

from __future__ import annotations

import pytest

from bench._execution import Unavailable
from bench.recovery import measure

pytestmark = pytest.mark.timeout(120)


def test_restart_dispatches_and_warm_rebuild_restores() -> None:
    try:
        result = measure(actions=200, restarts=2)
    except Unavailable as exc:
        pytest.skip(str(exc))
    assert len(result["restart_s"]) == 2
    assert all(0 < s < 120 for s in result["restart_s"])
    warm = result["warm"]
    # Two restarts each scheduled up to 64 actions; the warm rebuild restores them as running.
    assert warm["restored_running"] == 64
    assert warm["waiting"] == 200 - 64
    assert 0 < warm["rebuild_to_first_dispatch_s"] <= warm["rebuild_total_s"]
