"""Static pods: the control plane's token bucket, pod readiness and the per-exec overhead."""

from __future__ import annotations

import pytest

from workers.algorithms.tangram import ResourceDemand
from workers.sim.tangram.baselines import PodParams, simulate_static_pods
from workers.sim.tangram.baselines.static_pods import _TokenBucket
from workers.sim.tangram.trace import ActionTemplate, Step, Trace, TrajectoryTrace


def test_token_bucket_admits_a_burst_then_one_call_per_period() -> None:
    bucket = _TokenBucket(rate=10.0, burst=3)
    admitted = [bucket.admit(0.0) for _ in range(5)]
    assert admitted == pytest.approx([0.0, 0.0, 0.0, 0.1, 0.2])
    # idle for a second: the bucket refills to its burst, never beyond
    assert [bucket.admit(1.2) for _ in range(4)] == pytest.approx([1.2, 1.2, 1.2, 1.3])


def test_token_bucket_of_one_is_a_serial_server() -> None:
    bucket = _TokenBucket(rate=50.0, burst=1)
    assert [bucket.admit(0.0) for _ in range(3)] == pytest.approx([0.0, 0.02, 0.04])
    assert bucket.admit(0.05) == pytest.approx(0.06)  # still behind the earlier calls
    assert bucket.admit(1.0) == pytest.approx(1.0)


def _env_trace(count: int, llm_s: float) -> Trace:
    env = ActionTemplate("sh", "env", 1.0, {"cpu": ResourceDemand.exactly(1)})
    steps = (Step(llm_seconds=llm_s), Step(action=env))
    return Trace("env", [TrajectoryTrace(f"t{i}", "x", 0.0, steps) for i in range(count)])


def test_pods_wait_for_the_control_plane_and_the_start() -> None:
    # 4 pods at t=0, 1 pod/s; the action arrives at once (no LLM time before it)
    serial = PodParams(pods_per_second=1.0, pods_burst=1, pod_start_s=0.5, exec_overhead_s=0.0)
    result = simulate_static_pods(_env_trace(4, 0.0), nodes=1, cores_per_node=8, params=serial)
    started = sorted(r.started for r in result.records)
    assert started == pytest.approx([1.5, 2.5, 3.5, 4.5])  # admitted at 0,1,2,3 + 1 s + 0.5 s
    burst = PodParams(pods_per_second=1.0, pods_burst=4, pod_start_s=0.5, exec_overhead_s=0.0)
    result = simulate_static_pods(_env_trace(4, 0.0), nodes=1, cores_per_node=8, params=burst)
    assert sorted(r.started for r in result.records) == pytest.approx([1.5] * 4)


def test_exec_overhead_is_added_to_every_action() -> None:
    for overhead in (0.0, 0.02, 0.1):
        params = PodParams(pod_start_s=0.0, exec_overhead_s=overhead)
        result = simulate_static_pods(_env_trace(2, 5.0), nodes=1, cores_per_node=4, params=params)
        assert all(r.act == pytest.approx(1.0 + overhead) for r in result.records)


@pytest.mark.parametrize(
    "changes",
    [{"pods_per_second": 0.0}, {"pods_burst": 0}, {"pod_start_s": -1.0}, {"exec_overhead_s": -0.1}],
)
def test_pod_params_reject_impossible_values(changes: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        PodParams(**changes)  # type: ignore[arg-type]
