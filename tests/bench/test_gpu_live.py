"""gpu_live's predictions and calibration (bench/_gpu_live_sim.py), without loading any model."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from bench._gpu_live_sim import (
    Arrival,
    Reported,
    calibrate,
    predict_eoe,
    predict_isolated,
    prediction_error,
)
from bench.gpu_live import STANDIN_GROUP_NICE, group_nice

COSTS = {f"rm-{i}": {"execute_s": 1.0, "restore_s": 0.25, "host_mb": 10.0} for i in range(6)}


def fake_services() -> Any:
    return {name: SimpleNamespace(host_mb=10.0) for name in COSTS}


def burst(service: str, n: int, at: float = 0.0) -> list[Arrival]:
    return [Arrival(at + 0.001 * k, service, f"{service}/{k}") for k in range(n)]


def test_isolated_replay_without_slots_is_each_service_fifo() -> None:
    arrivals = burst("rm-0", 3) + burst("rm-1", 1)
    result = predict_isolated(arrivals, COSTS)
    # rm-0: ends at 1, 2, 3 (minus arrivals), rm-1: 1
    expected = (1.0 + (2.0 - 0.001) + (3.0 - 0.002) + 1.0) / 4
    assert result["mean_act_s"] == pytest.approx(expected)


def test_isolated_replay_with_one_slot_serializes_services_in_arrival_order() -> None:
    arrivals = burst("rm-0", 1) + burst("rm-1", 1, at=0.5)
    result = predict_isolated(sorted(arrivals, key=lambda a: a.at), COSTS, slots=1)
    assert result["mean_act_s"] == pytest.approx((1.0 + (2.0 - 0.5)) / 2)
    assert result["makespan_s"] == pytest.approx(2.0)


def test_eoe_prediction_spreads_a_burst_unless_slots_bound_it() -> None:
    arrivals = burst("rm-0", 4)
    services = fake_services()
    spread = predict_eoe(services, arrivals, COSTS)
    gated = predict_eoe(services, arrivals, COSTS, slots=1)
    assert spread["restores"] >= 2  # idle devices take a copy rather than queue
    assert spread["mean_act_s"] < 2.0
    # one slot: the four executions run one after another, whatever the devices
    assert gated["makespan_s"] >= 4.0
    assert gated["mean_act_s"] > spread["mean_act_s"]


def test_calibration_averages_the_agent_reports_per_service() -> None:
    served = [
        Reported("rm-0", True, 0.0, 0.3, 1.0),
        Reported("rm-0", False, 0.2, 0.0, 2.0),
        Reported("rm-1", False, 0.0, 0.0, 0.5),
    ]
    calibration = calibrate(served)
    assert calibration["rm-0"] == {"execute_s": 1.5, "restore_s": 0.3}
    assert calibration["rm-1"] == {"execute_s": 0.5}  # never restored: the profile's is used
    assert cast(dict[str, float], calibration["rm-1"]).get("restore_s") is None


def test_prediction_error_reads_the_median_prediction_against_the_median_run() -> None:
    error = prediction_error([0.9, 1.2, 3.0], [1.0, 1.0, 2.0])
    assert error["of_medians"] == pytest.approx(0.2)  # 1.2 / 1.0 - 1
    assert error["per_run"] == pytest.approx([-0.1, 0.2, 0.5])
    with pytest.raises(ValueError, match="one prediction per live run"):
        prediction_error([1.0], [1.0, 2.0])


def test_group_nice_reads_the_environment_and_names_it_when_bad() -> None:
    assert group_nice({}) == STANDIN_GROUP_NICE
    assert group_nice({"GPU_LIVE_GROUP_NICE": "0"}) == 0
    assert group_nice({"GPU_LIVE_GROUP_NICE": "-5"}) == -5
    for bad in ("fast", "-21", "20"):
        with pytest.raises(ValueError, match="GPU_LIVE_GROUP_NICE"):
            group_nice({"GPU_LIVE_GROUP_NICE": bad})


def test_eoe_prediction_with_admission_keeps_a_burst_on_its_warm_devices() -> None:
    arrivals = burst("rm-0", 4)
    services = fake_services()
    spread = predict_eoe(services, arrivals, COSTS, slots=2)
    admitted = predict_eoe(services, arrivals, COSTS, slots=2, admission=2)
    assert spread["restores"] == 4  # four idle devices, two of them then wait for a slot
    assert admitted["restores"] == 2
    # the same finishing times: the two later requests wait for a warm device instead of for
    # a slot, and two devices keep whatever they held
    assert admitted["mean_act_s"] == pytest.approx(spread["mean_act_s"])
