"""Algorithm 1 behaviour, live policies, introspection, and property tests over random
arrival/completion sequences (never over-allocated, everything eventually scheduled, GPU chunks
aligned, non-overlapping and coalesced once free)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workers.algorithms.tangram import (
    ActionSpec,
    BasicLimit,
    BasicTopology,
    CpuNodeSpec,
    CpuTopology,
    Elasticity,
    ElasticScheduler,
    GpuServiceSpec,
    GpuTopology,
    ResourceDemand,
    Topology,
)

from .test_topologies import _layout_ok


def _reward(action_id: str, t1: float, trajectory: str | None = None, max_dop: int = 32):
    return ActionSpec(
        action_id,
        {"cpu": ResourceDemand.between(1, max_dop), "memory_mb": ResourceDemand.exactly(100)},
        tool="pytest",
        key_resource="cpu",
        elasticity=Elasticity.amdahl(0.95, max_dop),
        t1=t1,
        trajectory_id=trajectory,
    )


def _env(action_id: str, trajectory: str | None = None) -> ActionSpec:
    return ActionSpec(
        action_id, {"cpu": ResourceDemand.exactly(1)}, tool="sh", trajectory_id=trajectory
    )


def _cpu_pool(cores: int = 32, nodes: int = 1) -> CpuTopology:
    return CpuTopology(
        [CpuNodeSpec.uniform(f"n{i}", cores, 2, memory_mb=1 << 20) for i in range(nodes)]
    )


def test_lone_elastic_action_gets_all_free_cores_up_to_max() -> None:
    scheduler = ElasticScheduler(_cpu_pool(32))
    scheduler.submit(_reward("r", 60.0), 0.0)
    (assignment,) = scheduler.schedule(0.0)
    assert assignment.dop == 32 and len(set(assignment.core_ids)) == 32
    scheduler.set_policy(max_dop=8)
    scheduler.complete("r", 5.0)
    scheduler.submit(_reward("r2", 60.0), 5.0)
    (assignment,) = scheduler.schedule(5.0)
    assert assignment.dop == 8


def test_non_scalable_and_unknown_get_minimum_units() -> None:
    scheduler = ElasticScheduler(_cpu_pool(32))
    unknown = ActionSpec(
        "u", {"cpu": ResourceDemand.between(2, 16)}, key_resource="cpu", tool="mystery"
    )
    scheduler.submit(unknown, 0.0)
    scheduler.submit(_env("e"), 0.0)
    got = {a.action_id: a.dop for a in scheduler.schedule(0.0)}
    assert got == {"u": 2, "e": 1}


def test_fixed_dop_and_fcfs_min_policies_switch_live() -> None:
    scheduler = ElasticScheduler(_cpu_pool(32), algorithm="fixed-dop", fixed_dop=4)
    for i in range(3):
        scheduler.submit(_reward(f"r{i}", 60.0), 0.0)
    assert [a.dop for a in scheduler.schedule(0.0)] == [4, 4, 4]
    scheduler.set_policy(algorithm="fcfs-min")
    scheduler.submit(_reward("r3", 60.0), 0.0)
    assert [a.dop for a in scheduler.schedule(0.0)] == [1]
    with pytest.raises(ValueError, match="algorithm"):
        scheduler.set_policy(algorithm="lifo")
    with pytest.raises(ValueError, match="depth"):
        scheduler.set_policy(depth=0)
    assert scheduler.policy()["algorithm"] == "fcfs-min"


def test_greedy_eviction_defers_tail_when_it_lowers_total_act() -> None:
    # 8 cores, 8 long perfectly elastic actions: all at 1 core each vs fewer at more cores.
    # With perfectly linear speedup, total ACT is minimised by running them one after another
    # at full width (SPT), so the greedy eviction must defer some of the tail.
    scheduler = ElasticScheduler(_cpu_pool(8))
    for i in range(8):
        spec = ActionSpec(
            f"r{i}",
            {"cpu": ResourceDemand.between(1, 8)},
            key_resource="cpu",
            elasticity=Elasticity.amdahl(1.0, 8),
            t1=80.0,
        )
        scheduler.submit(spec, 0.0)
    started = scheduler.schedule(0.0)
    assert 1 <= len(started) < 8
    assert started[0].action_id == "r0"  # FCFS head is never evicted
    deferred = scheduler.waiting_ids()
    assert scheduler.wait_reason(deferred[-1]) == "deferred by elastic eviction"
    assert sum(a.dop for a in started) <= 8


def test_head_wait_reasons_and_rejections() -> None:
    scheduler = ElasticScheduler(_cpu_pool(2))
    scheduler.submit(_env("a"), 0.0)
    scheduler.submit(_env("b"), 0.0)
    scheduler.submit(_env("c"), 0.0)
    scheduler.schedule(0.0)
    assert scheduler.head_wait_reason() == "no cores free"
    with pytest.raises(ValueError, match="already submitted"):
        scheduler.submit(_env("c"), 0.0)
    with pytest.raises(ValueError, match="exceeds pool capacity"):
        scheduler.submit(ActionSpec("big", {"cpu": ResourceDemand.exactly(3)}), 0.0)
    with pytest.raises(ValueError, match="not managed"):
        scheduler.submit(ActionSpec("g", {"gpu": ResourceDemand.exactly(1)}), 0.0)
    assert scheduler.cancel("c") and not scheduler.cancel("c")
    assert scheduler.cancel("a")  # running: frees its core
    assert [a.action_id for a in scheduler.schedule(1.0)] == []
    snapshot = scheduler.snapshot()
    assert snapshot["waiting"] == 0 and snapshot["running"] == 1


def test_quota_exhausted_reason_and_wakeup() -> None:
    topology = BasicTopology({"api:s": BasicLimit(quota=2, period_s=60.0)})
    scheduler = ElasticScheduler(topology)
    for i in range(3):
        scheduler.submit(ActionSpec(f"c{i}", {"api:s": ResourceDemand.exactly(1)}), 1.0)
    assert len(scheduler.schedule(1.0)) == 2
    assert scheduler.head_wait_reason() == "quota exhausted"
    assert scheduler.next_wakeup(1.0) == 60.0
    assert [a.quota_units for a in scheduler.schedule(60.0)] == [{"api:s": 1}]


def test_unknown_duration_uses_history_average() -> None:
    scheduler = ElasticScheduler(_cpu_pool(4))
    scheduler.submit(_env("a"), 0.0)
    scheduler.schedule(0.0)
    scheduler.complete("a", 3.0)
    scheduler.submit(_env("b"), 3.0)
    (assignment,) = scheduler.schedule(3.0)
    assert assignment.expected_seconds == pytest.approx(3.0)


# --- property tests -----------------------------------------------------------------------

_ops = st.lists(
    st.tuples(
        st.sampled_from(["submit", "submit", "complete", "cancel", "tick"]),
        st.integers(0, 10_000),
    ),
    min_size=1,
    max_size=40,
)


def _check_cpu(topology: CpuTopology) -> None:
    topology.core_owners()  # raises on a core held twice
    for state in topology.nodes.values():
        held = state.spec.cores - state.free_cores
        assert 0 <= held <= state.spec.cores
        assert sum(len(f) for f in state.free_by_numa) == state.free_cores
        assert state.free_memory_mb >= 0


def _check_basic(topology: BasicTopology) -> None:
    for name, limit in topology.limits.items():
        assert limit.concurrency is None or topology.in_use[name] <= limit.concurrency
        assert limit.quota is None or topology.used_in_period[name] <= limit.quota
    assert topology.violations == 0


def _make_spec(kind: str, n: int, value: int) -> ActionSpec:
    if kind == "cpu":
        trajectory = f"t{value % 5}"
        if value % 3 == 0:
            return _reward(f"a{n}", 1.0 + value % 50, trajectory, max_dop=1 + value % 16)
        return _env(f"a{n}", trajectory)
    if kind == "gpu":
        options = [[1, 2, 4, 8], [2, 4, 8], [1], [4]][value % 4]
        return ActionSpec(
            f"a{n}",
            {"gpu": ResourceDemand.one_of(options)},
            service=f"s{value % 3}",
            tool=f"s{value % 3}",
            key_resource="gpu",
            elasticity=Elasticity.from_points({1: 1.0, 2: 0.9, 4: 0.8, 8: 0.6}, 8),
            t1=1.0 + value % 20 if value % 5 else None,
        )
    api = f"api:{value % 2}"
    return ActionSpec(f"a{n}", {api: ResourceDemand.exactly(1 + value % 2)}, tool=api)


def _make_topology(kind: str) -> Topology:
    if kind == "cpu":
        return _cpu_pool(cores=8, nodes=2)
    if kind == "gpu":
        services = {f"s{i}": GpuServiceSpec(f"s{i}", 20_000.0 * (i + 1)) for i in range(3)}
        return GpuTopology(["g0", "g1"], services, gpus_per_node=8, gpu_memory_mb=80_000)
    return BasicTopology(
        {
            "api:0": BasicLimit(concurrency=3, quota=5, period_s=10.0),
            "api:1": BasicLimit(concurrency=2),
        }
    )


def _check(kind: str, topology: Topology) -> None:
    if kind == "cpu":
        assert isinstance(topology, CpuTopology)
        _check_cpu(topology)
    elif kind == "gpu":
        assert isinstance(topology, GpuTopology)
        _layout_ok(topology)
    else:
        assert isinstance(topology, BasicTopology)
        _check_basic(topology)


@pytest.mark.parametrize("kind", ["cpu", "gpu", "basic"])
@pytest.mark.parametrize("algorithm", ["elastic", "fcfs-min", "fixed-dop"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_ops)
def test_random_sequences_keep_invariants_and_drain(kind: str, algorithm: str, ops) -> None:
    topology = _make_topology(kind)
    scheduler = ElasticScheduler(topology, algorithm=algorithm, fixed_dop=4)
    now = 0.0
    submitted: set[str] = set()
    finished: set[str] = set()
    running: list[str] = []
    for n, (op, value) in enumerate(ops):
        now += (value % 7) * 0.5
        if op == "submit":
            spec = _make_spec(kind, n, value)
            scheduler.submit(spec, now)
            submitted.add(spec.action_id)
        elif op == "complete" and running:
            action_id = running.pop(value % len(running))
            scheduler.complete(action_id, now)
            finished.add(action_id)
        elif op == "cancel" and scheduler.waiting_ids():
            waiting = scheduler.waiting_ids()
            action_id = waiting[value % len(waiting)]
            assert scheduler.cancel(action_id, now)
            finished.add(action_id)
        running.extend(a.action_id for a in scheduler.schedule(now))
        _check(kind, topology)
    for _ in range(200):  # drain: every action is eventually scheduled
        if not scheduler.waiting_ids() and not running:
            break
        now += 11.0
        for action_id in running:
            scheduler.complete(action_id, now)
            finished.add(action_id)
        running = [a.action_id for a in scheduler.schedule(now)]
        _check(kind, topology)
    assert not scheduler.waiting_ids() and not running
    assert finished == submitted
    if kind == "gpu":
        assert isinstance(topology, GpuTopology)
        assert topology.free_counts() == (0, 0, 0, 2)  # every freed chunk coalesced
    if kind == "cpu":
        assert isinstance(topology, CpuTopology)
        assert all(s.free_cores == s.spec.cores for s in topology.nodes.values())


def _teacher(action_id: str, t1: float = 1.0) -> ActionSpec:
    return ActionSpec(
        action_id,
        {"gpu": ResourceDemand.one_of([1, 2, 4, 8])},
        service="m",
        tool="m",
        key_resource="gpu",
        elasticity=Elasticity.from_points({1: 1.0, 2: 0.9, 4: 0.8, 8: 0.6}, 8),
        t1=t1,
    )


def test_gpu_dop_choice_counts_the_restore_of_an_uncached_instance() -> None:
    services = {"m": GpuServiceSpec("m", 20_000, load_mb_per_s=1_000, load_overhead_s=1.0)}
    topology = GpuTopology(["g0"], services, gpus_per_node=8)
    scheduler = ElasticScheduler(topology)
    scheduler.set_policy(max_dop=2)
    scheduler.submit(_teacher("warmup"), 0.0)
    (first,) = scheduler.schedule(0.0)
    assert first.dop == 2 and first.load_seconds > 0  # cold everywhere: widest allowed
    scheduler.complete("warmup", 30.0)
    scheduler.set_policy(max_dop=None)
    scheduler.submit(_teacher("again"), 30.0)
    (second,) = scheduler.schedule(30.0)
    # DoP 8 would run 1/(0.6*8) = 0.21 s but restore 3.5 s; the cached DoP-2 instance wins
    assert second.dop == 2 and second.load_seconds == 0.0
    assert second.gpu_ids == first.gpu_ids


def test_head_waits_for_service_loading() -> None:
    services = {"m": GpuServiceSpec("m", 20_000, load_mb_per_s=1_000, load_overhead_s=1.0)}
    topology = GpuTopology(["g0"], services, gpus_per_node=1)
    scheduler = ElasticScheduler(topology)
    single = ActionSpec("a", {"gpu": ResourceDemand.exactly(1)}, service="m", tool="m", t1=1.0)
    scheduler.submit(single, 0.0)
    scheduler.submit(ActionSpec("b", single.resources, service="m", tool="m", t1=1.0), 0.0)
    (started,) = scheduler.schedule(0.0)
    assert started.load_seconds > 0
    assert scheduler.schedule(0.5) == []  # the next pass sees the restore in progress
    assert scheduler.head_wait_reason() == "service loading"
    assert scheduler.schedule(30.0) == [] and scheduler.head_wait_reason() == "no gpu chunk free"


def test_a_pass_stops_at_the_candidate_cap_and_asks_for_another_at_once() -> None:
    topology = CpuTopology([CpuNodeSpec.uniform("n0", 8, 1, memory_mb=1 << 20)])
    scheduler = ElasticScheduler(topology, candidate_cap=2)
    for i in range(5):
        scheduler.submit(_env(f"e{i}"), 0.0)
    started = [a.action_id for a in scheduler.schedule(0.0)]
    assert started == ["e0", "e1"]
    assert scheduler.next_wakeup(0.0) == 0.0  # units are free and work waits: call again now
    while scheduler.next_wakeup(0.0) == 0.0:
        started += [a.action_id for a in scheduler.schedule(0.0)]
    assert started == [f"e{i}" for i in range(5)]  # the same FCFS order, one cap at a time
    assert scheduler.next_wakeup(0.0) is None
    uncapped = ElasticScheduler(topology.__class__([CpuNodeSpec.uniform("n0", 8, 1, 1 << 20)]))
    for i in range(5):
        uncapped.submit(_env(f"e{i}"), 0.0)
    assert len(uncapped.schedule(0.0)) == 5 and uncapped.next_wakeup(0.0) is None


def test_the_candidate_cap_is_checked() -> None:
    topology = CpuTopology([CpuNodeSpec.uniform("n0", 8, 1, memory_mb=1 << 20)])
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="candidate_cap"):
            ElasticScheduler(topology, candidate_cap=bad)  # type: ignore[arg-type]


def test_the_scheduler_counts_the_eviction_trials_of_its_passes() -> None:
    scheduler = ElasticScheduler(
        CpuTopology([CpuNodeSpec.uniform("n0", 8, 1, memory_mb=1 << 20)]), depth=2
    )
    for n in range(6):
        scheduler.submit(
            ActionSpec(
                f"a{n}",
                {"cpu": ResourceDemand.between(1, 8)},
                tool="t",
                key_resource="cpu",
                elasticity=Elasticity.amdahl(0.9, 8),
                t1=10.0,
            ),
            0.0,
        )
    scheduler.schedule(0.0)
    # one elastic split: the full prefix at least, and at most one trial per possible eviction
    assert 1 <= scheduler.eviction_trials <= 7
    before = scheduler.eviction_trials
    scheduler.set_policy(algorithm="fcfs-min")
    scheduler.schedule(1.0)
    assert scheduler.eviction_trials == before  # no elastic allocation, no trials
