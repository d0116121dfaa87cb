"""The Tangram simulator: JSONL round trip, generators, the runner driving the real scheduler,
and each baseline's defining behaviour."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.algorithms.tangram import (
    BasicLimit,
    BasicTopology,
    CpuNodeSpec,
    CpuTopology,
    ElasticScheduler,
    GpuTopology,
    ResourceDemand,
)
from workers.sim.tangram.baselines import (
    lower_bound,
    simulate_isolated_services,
    simulate_naive_api,
    simulate_static_pods,
)
from workers.sim.tangram.runner import RateLimitedApi, TangramSimulation
from workers.sim.tangram.trace import (
    ActionTemplate,
    Step,
    Trace,
    TrajectoryTrace,
    load_jsonl,
    parse_jsonl,
    save_jsonl,
)
from workers.sim.tangram.workloads import (
    ai_coding_trace,
    deepsearch_judge_service,
    deepsearch_limits,
    deepsearch_trace,
    mopd_services,
    mopd_trace,
)


def _cpu_scheduler(cores: int = 64, nodes: int = 1, **policy: object) -> ElasticScheduler:
    topology = CpuTopology(
        [CpuNodeSpec.uniform(f"n{i}", cores, 4, memory_mb=1 << 22) for i in range(nodes)]
    )
    return ElasticScheduler(topology, **policy)  # type: ignore[arg-type]


def test_jsonl_round_trip(tmp_path: Path) -> None:
    trace = ai_coding_trace(5, seed=3)
    path = tmp_path / "trace.jsonl"
    save_jsonl(trace, path)
    loaded = load_jsonl(path)
    assert loaded.trajectories == trace.trajectories
    assert len(path.read_text().splitlines()) == 5


def test_jsonl_errors_name_the_line() -> None:
    with pytest.raises(ValueError, match="trace line 2"):
        list(parse_jsonl('{"trajectory_id": "a", "steps": []}\n{"steps": [{"llm": 1}]}\n'))


def test_generators_follow_their_parameters() -> None:
    coding = ai_coding_trace(20, seed=1)
    for trajectory in coding.trajectories:
        kinds = [a.kind for a in trajectory.actions()]
        assert kinds[-1] == "reward" and set(kinds[:-1]) == {"env"}
        reward = list(trajectory.actions())[-1]
        assert reward.profiled and reward.resources["cpu"].maximum == 32
        assert all(not a.profiled for a in trajectory.actions() if a.kind == "env")
    mopd = mopd_trace(30, seed=1)
    services = mopd_services()
    for trajectory in mopd.trajectories:
        (request,) = trajectory.actions()
        weights = services[str(request.service)].weights_mb
        assert all(weights / k <= 80_000 for k in request.resources["gpu"].options())
    search = deepsearch_trace(10, seed=1)
    assert {a.kind for t in search.trajectories for a in t.actions()} == {"api", "judge"}


def _one_action_trace(t1: float, max_dop: int) -> Trace:
    reward = ActionTemplate(
        tool="pytest",
        kind="reward",
        t1=t1,
        resources={"cpu": ResourceDemand.between(1, max_dop)},
        profiled=True,
        key_resource="cpu",
        elasticity={"amdahl": 1.0},
    )
    steps = (Step(llm_seconds=2.0), Step(action=reward))
    return Trace("one", [TrajectoryTrace("t0", "x", 0.0, steps)])


def test_runner_uses_scheduler_dop_and_true_duration() -> None:
    result = TangramSimulation(_one_action_trace(64.0, 16), {"cpu": _cpu_scheduler()}).run()
    (record,) = result.records
    assert record.submitted == pytest.approx(2.0)
    assert record.dop == 16
    assert record.act == pytest.approx(4.0)  # 64 s of perfectly parallel work on 16 cores
    fixed = _cpu_scheduler(algorithm="fixed-dop", fixed_dop=4)
    (record,) = TangramSimulation(_one_action_trace(64.0, 16), {"cpu": fixed}).run().records
    assert record.dop == 4 and record.act == pytest.approx(16.0)


def test_elastic_beats_fixed_dop_when_cores_are_free() -> None:
    trace = ai_coding_trace(8, seed=2)
    elastic = TangramSimulation(trace, {"cpu": _cpu_scheduler(128)}).run()
    fixed = TangramSimulation(trace, {"cpu": _cpu_scheduler(128, algorithm="fixed-dop")}).run()
    assert len(elastic.records) == trace.action_count()
    assert elastic.mean_act("reward") < fixed.mean_act("reward")
    bound = lower_bound(trace, {"cpu": 128})
    assert bound.mean_act() <= elastic.mean_act() + 1e-9


def test_static_pods_cap_reward_at_the_pod_limit() -> None:
    result = simulate_static_pods(_one_action_trace(64.0, 16), nodes=1, cores_per_node=64)
    (record,) = result.records
    # the pod is ready 1/50 s (control plane) + 2 s (start) after t=0, the action arrives at
    # 2 s; the pod limit is 4 CPUs: 64 s of linear work takes 16 s, plus the exec overhead
    assert record.act == pytest.approx(0.02 + 16.0 + 0.1)


def test_static_pods_share_a_congested_node() -> None:
    env = ActionTemplate("sh", "env", 10.0, {"cpu": ResourceDemand.exactly(1)})
    steps = (Step(llm_seconds=5.0), Step(action=env))
    trajectories = [TrajectoryTrace(f"t{i}", "x", 0.0, steps) for i in range(4)]
    result = simulate_static_pods(Trace("c", trajectories), nodes=1, cores_per_node=2)
    # four one-core actions on two cores: each runs at half speed
    assert all(r.finished - r.started == pytest.approx(20.0 + 0.1) for r in result.records)


def test_gpu_pool_and_isolated_services_run_mopd() -> None:
    trace = mopd_trace(40, seed=4)
    topology = GpuTopology(["g0", "g1"], mopd_services(), gpus_per_node=8)
    pooled = TangramSimulation(trace, {"gpu": ElasticScheduler(topology)}).run()
    isolated = simulate_isolated_services(trace, gpus_per_service=4)
    assert len(pooled.records) == len(isolated.records) == 40
    assert topology.loads > 0  # services were restored on demand (EOE)
    assert topology.free_counts() == (0, 0, 0, 2)
    assert all(r.dop == 4 or r.dop == 2 for r in isolated.records)


def test_quota_manager_never_violates_while_naive_retries_fail() -> None:
    trace = deepsearch_trace(60, seed=5)
    tight = {
        name: BasicLimit(concurrency=4, quota=30, period_s=10.0) for name in deepsearch_limits()
    }
    apis = {name: RateLimitedApi(limit) for name, limit in tight.items()}
    gpu = ElasticScheduler(GpuTopology(["g0"], {"judge": deepsearch_judge_service()}))
    managed = TangramSimulation(
        trace, {"api": ElasticScheduler(BasicTopology(tight)), "gpu": gpu}, apis=apis
    ).run()
    assert managed.extra["api_rejections"] == 0
    assert not any(r.failed for r in managed.records)
    naive = simulate_naive_api(trace, tight)
    assert naive.extra["api_rejections"] > 0
    assert any(r.failed for r in naive.records)


def test_the_runner_follows_a_capped_pass_at_once() -> None:
    """A scheduler that admits one candidate a pass asks for another pass at once; the runner
    gives it, so a synchronized batch starts at the same virtual instant as without the cap."""
    env = ActionTemplate(tool="env", kind="env", t1=5.0, resources={"cpu": ResourceDemand(1, 1)})
    steps = (Step(llm_seconds=2.0), Step(action=env))
    trace = Trace("batch", [TrajectoryTrace(f"t{i}", "x", 0.0, steps) for i in range(6)])
    capped = TangramSimulation(trace, {"cpu": _cpu_scheduler(8, candidate_cap=1)}).run()
    free = TangramSimulation(trace, {"cpu": _cpu_scheduler(8, candidate_cap=None)}).run()
    assert len(capped.records) == 6
    assert capped.extra["scheduler_passes"] > free.extra["scheduler_passes"]
    assert [r.started for r in capped.records] == [2.0] * 6
    assert [r.started for r in free.records] == [2.0] * 6
