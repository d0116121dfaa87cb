"""Failed API calls are counted on both sides: the naive retries give up after their retries,
and a call the quota manager sends that the API refuses fails too."""

from __future__ import annotations

from workers.algorithms.tangram import (
    BasicLimit,
    BasicTopology,
    ElasticScheduler,
    GpuTopology,
    ResourceDemand,
)
from workers.sim.tangram.baselines import simulate_naive_api
from workers.sim.tangram.runner import RateLimitedApi, TangramSimulation
from workers.sim.tangram.trace import ActionTemplate, Step, Trace, TrajectoryTrace
from workers.sim.tangram.workloads import deepsearch_judge_service

API = "api:search"


def _calls(latencies: list[float]) -> Trace:
    """One search call per trajectory, all issued at t = 0."""
    trajectories = []
    for i, latency in enumerate(latencies):
        call = ActionTemplate("search", "api", latency, {API: ResourceDemand.exactly(1)})
        trajectories.append(TrajectoryTrace(f"t{i}", "search", 0.0, (Step(action=call),)))
    return Trace("calls", trajectories)


def test_naive_retries_count_attempts_and_give_up() -> None:
    limits = {API: BasicLimit(concurrency=1)}
    # the second call is refused at 0, 1.1 and 3.2 (backoff 1, 2 s) and admitted at 7.3
    waited = simulate_naive_api(_calls([5.0, 1.0]), limits)
    second = next(r for r in waited.records if r.trajectory_id == "t1")
    assert second.attempts == 4 and not second.failed
    assert second.started == 7.3
    # with the first call holding the API for 10 s, the fourth refusal is the last
    gave_up = simulate_naive_api(_calls([10.0, 1.0]), limits)
    second = next(r for r in gave_up.records if r.trajectory_id == "t1")
    assert second.attempts == 4 and second.failed
    assert gave_up.extra["api_rejections"] == 4


def _managed(manager: BasicLimit, api: BasicLimit, latencies: list[float]) -> TangramSimulation:
    apis = {API: RateLimitedApi(api)}
    gpu = ElasticScheduler(GpuTopology(["g0"], {"judge": deepsearch_judge_service()}))
    pools = {"api": ElasticScheduler(BasicTopology({API: manager})), "gpu": gpu}
    return TangramSimulation(_calls(latencies), pools, apis=apis)


def test_a_call_the_api_refuses_fails_under_the_quota_manager() -> None:
    # the manager believes the API takes 4 concurrent calls; it takes 2
    simulation = _managed(BasicLimit(concurrency=4), BasicLimit(concurrency=2), [1.0] * 8)
    result = simulation.run()
    failed = [r for r in result.records if r.failed]
    assert len(failed) == 4  # two refused in each of the two waves of four
    assert result.extra["api_rejections"] == len(failed)
    assert simulation.apis[API].in_flight == 0  # refused calls never held a slot


def test_matching_limits_fail_nothing() -> None:
    limit = BasicLimit(concurrency=2, quota=4, period_s=10.0)
    result = _managed(limit, limit, [1.0] * 6).run()
    assert result.extra["api_rejections"] == 0
    assert not any(r.failed for r in result.records)
    assert max(r.started for r in result.records) >= 10.0  # the quota held the last two back
