"""The GPU baselines' defining behaviour: continuous batching and data-parallel replicas of the
isolated services, the ServerlessLLM-like loaders, and the original MOPD setting."""

from __future__ import annotations

import pytest

from workers.algorithms.tangram import GpuServiceSpec, ResourceDemand
from workers.sim.tangram.baselines.isolated_services import (
    PREFILL_BATCHING,
    SERVERLESS_DRAM_MB_PER_S,
    BatchingCurve,
    IsolatedConfig,
    serverless_loader,
    simulate_isolated_services,
    slowed_restore,
)
from workers.sim.tangram.trace import ActionTemplate, Step, Trace, TrajectoryTrace
from workers.sim.tangram.workloads import MOPD_ORIGINAL, MopdParams, mopd_trace

FLAT = BatchingCurve({1: 1.0})
PERFECT = BatchingCurve({1: 1.0, 64: 64.0})


def _requests(durations: list[float], options: tuple[int, ...] = (1, 2, 4)) -> Trace:
    """One request per trajectory, all for service ``m`` and all arriving at t = 1."""
    trajectories = []
    for i, t1 in enumerate(durations):
        request = ActionTemplate(
            tool="m",
            kind="logprob",
            t1=t1,
            resources={"gpu": ResourceDemand.one_of(options)},
            key_resource="gpu",
            elasticity={"points": {"1": 1.0, "2": 1.0, "4": 1.0}},
            service="m",
        )
        steps = (Step(llm_seconds=1.0), Step(action=request))
        trajectories.append(TrajectoryTrace(f"t{i}", "x", 0.0, steps))
    return Trace("requests", trajectories)


def _acts(config: IsolatedConfig, durations: list[float]) -> list[float]:
    result = simulate_isolated_services(_requests(durations), config)
    by_id = {r.trajectory_id: r for r in result.records}
    return [by_id[f"t{i}"].act for i in range(len(durations))]


def test_batching_curve_interpolates_and_stays_flat() -> None:
    curve = BatchingCurve({1: 1.0, 4: 1.6, 8: 2.0})
    assert curve.throughput(1) == 1.0 and curve.throughput(2) == pytest.approx(1.2)
    assert curve.throughput(8) == 2.0 and curve.throughput(100) == 2.0
    assert curve.throughput(0) == 0.0
    assert PREFILL_BATCHING.throughput(64) < 1.2  # prefill gains little from batching


def test_one_request_at_a_time_is_fcfs() -> None:
    # TP=4 on the service's 4 GPUs, perfect scaling: 4, 8, 12 s of work take 1, 2, 3 s
    acts = _acts(IsolatedConfig(max_batch=1), [4.0, 8.0, 12.0])
    assert acts == pytest.approx([1.0, 3.0, 6.0])


def test_continuous_batching_shares_the_instance() -> None:
    # flat throughput: the three run together at a third of the speed each (processor sharing)
    assert _acts(IsolatedConfig(max_batch=3, batching=FLAT), [4.0, 8.0, 12.0]) == pytest.approx(
        [3.0, 5.0, 6.0]
    )
    # perfect batching: each runs as if alone
    assert _acts(IsolatedConfig(max_batch=3, batching=PERFECT), [4.0, 8.0, 12.0]) == pytest.approx(
        [1.0, 2.0, 3.0]
    )
    # a full batch: the third waits for a slot, then runs alone
    assert _acts(IsolatedConfig(max_batch=2, batching=PERFECT), [4.0, 8.0, 12.0]) == pytest.approx(
        [1.0, 2.0, 4.0]
    )


def test_replicas_split_the_service_gpus() -> None:
    config = IsolatedConfig(replicate=True)  # TP=1 fits: four replicas of one GPU each
    result = simulate_isolated_services(_requests([4.0] * 5), config)
    assert all(r.dop == 1 for r in result.records)
    assert sorted(r.act for r in result.records) == pytest.approx([4.0] * 4 + [8.0])
    assert result.name == "isolated_dp_batch1"


def test_serverless_loaders() -> None:
    service = GpuServiceSpec("m", 60_000, load_mb_per_s=25_000, load_overhead_s=0.3)
    dram = serverless_loader(SERVERLESS_DRAM_MB_PER_S)
    # the whole checkpoint through ServerlessLLM's loader, whatever the GPU count
    assert dram(service, 1) == dram(service, 8) == pytest.approx(60_000 / SERVERLESS_DRAM_MB_PER_S)
    assert dram(service, 2) == pytest.approx(60_000 * 1.253 / 65_500)  # Qwen3-32B's rate
    assert slowed_restore(3.0)(service, 4) == pytest.approx(3 * (0.3 + 15_000 / 25_000))


def test_original_mopd_setting_shares_teachers_between_tasks() -> None:
    trace = mopd_trace(30, params=MOPD_ORIGINAL)
    teachers = trace.params["task_teachers"]
    assert len(teachers) == 3 and all(len(t) == 4 for t in teachers)
    assert set(teachers[0]) & set(teachers[1]) == {"teacher-3"}
    assert {t.start for t in trace.trajectories} == {0.0, 40.0, 80.0}
    current = mopd_trace(30, params=MopdParams()).params["task_teachers"]
    assert len(current) == 5 and len({s for t in current for s in t}) == 10  # disjoint pairs
