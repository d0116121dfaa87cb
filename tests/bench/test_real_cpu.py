"""The real_cpu benchmark's core at a tiny size: every approach really runs suites (shape only)."""

from __future__ import annotations

import os

import pytest

from bench._execution import Unavailable
from bench.real_cpu import measure

pytestmark = pytest.mark.timeout(180)


def test_every_approach_runs_the_suites_and_reports_acts() -> None:
    cores = min(2, len(os.sched_getaffinity(0)))
    params = {
        "approaches": ["elastic", "fixed-dop-1", "reservation"],
        "arrivals_s": [0.0, 0.2],
        "think_s": 0.1,
        "shell_steps": 1,
        "cores": cores,
        "suite": {"tests": 2, "rounds_per_test": 2},
    }
    try:
        result = measure(params)
    except Unavailable as exc:
        pytest.skip(str(exc))
    calibration = result.pop("calibration")
    assert calibration["t1_s"] > 0 and calibration["efficiency"][0] == 1.0
    assert set(result) == {"elastic", "fixed-dop-1", "reservation"}
    for name, run in result.items():
        assert len(run["act_suite_s"]) == 2 and len(run["act_shell_s"]) == 2, name
        assert all(act > 0 for act in run["act_all_s"]), name
    assert result["fixed-dop-1"]["suite_dops"] == [1.0, 1.0]
    assert result["reservation"]["suite_dops"] == [float(cores)] * 2
