"""The GPU pool's memory-derived DoP floor (``GpuTopology.resident_dop``): an elastic GPU action
starts no narrower than the narrowest chunk that could cache every service the pool is serving,
so narrow starts do not evict each other's instances; the baselines' policies ignore it. And
the GPU estimate's exploration, the paper's ``depth`` options without the wide ladder."""

from __future__ import annotations

from workers.algorithms.tangram import (
    ActionSpec,
    Elasticity,
    ElasticScheduler,
    GpuServiceSpec,
    GpuTopology,
    ResourceDemand,
)

# restores so fast that one GPU per action is what DPArrange would pick without the floor
FAST = {"load_mb_per_s": 1e9, "load_overhead_s": 0.0}
ELASTICITY = Elasticity.from_points({1: 1.0, 2: 0.9, 4: 0.8, 8: 0.6}, 8)


def _services(**weights_gb: float) -> dict[str, GpuServiceSpec]:
    return {name: GpuServiceSpec(name, gb * 1000.0, **FAST) for name, gb in weights_gb.items()}


def _action(action_id: str, service: str) -> ActionSpec:
    return ActionSpec(
        action_id,
        {"gpu": ResourceDemand.one_of([1, 2, 4, 8])},
        service=service,
        tool=service,
        key_resource="gpu",
        elasticity=ELASTICITY,
        t1=1.0,
    )


def test_resident_dop_is_the_narrowest_chunk_caching_every_service() -> None:
    topology = GpuTopology(["g0"], _services(a=60, b=60, c=16, d=120), gpus_per_node=8)
    assert topology.resident_dop([]) == 1
    assert topology.resident_dop(["a"]) == 1  # 60 GB fits one 80 GB GPU
    assert topology.resident_dop(["a", "b"]) == 2  # 120 GB: 60 GB per GPU on two
    assert topology.resident_dop(["a", "b", "c"]) == 2  # 136 GB: 68 GB per GPU
    assert topology.resident_dop(["a", "b", "c", "d"]) == 4  # 256 GB: 64 GB per GPU
    assert topology.resident_dop(["a", "a", "unknown"]) == 1  # once each; unknown ignored
    # never wider than the widest node, even when nothing fits
    small = GpuTopology(["g0"], _services(a=300, b=300), gpus_per_node=2)
    assert small.resident_dop(["a", "b"]) == 2
    assert topology.dop_floors([_action("x", "a")]) == {}
    assert topology.dop_floors([_action("x", "a"), _action("y", "b")]) == {"gpu": 2}


def test_the_floor_yields_to_the_widest_free_chunk() -> None:
    topology = GpuTopology(["g0"], _services(a=60, b=60, c=60, d=60), gpus_per_node=8)
    specs = [_action(name, name) for name in "abcd"]  # 240 GB: 60 GB per GPU on four
    assert topology.dop_floors(specs) == {"gpu": 4}
    topology.allocate(_action("x", "a"), "pool", {"gpu": 4}, 0.0)
    assert topology.dop_floors(specs) == {"gpu": 4}  # a free 4-chunk is left
    topology.allocate(_action("y", "b"), "pool", {"gpu": 2}, 0.0)
    # only a 2-chunk is free: a floor of 4 would leave it idle while actions wait
    assert topology.dop_floors(specs) == {"gpu": 2}


def test_elastic_starts_no_narrower_than_the_services_floor() -> None:
    topology = GpuTopology(["g0"], _services(a=60, b=60), gpus_per_node=8)
    scheduler = ElasticScheduler(topology)
    for i in range(8):
        scheduler.submit(_action(f"r{i}", "a" if i % 2 else "b"), 0.0)
    started = scheduler.schedule(0.0)
    assert started
    # a and b do not fit on one GPU together: two GPUs at least, every action
    assert all(a.dop >= 2 for a in started)


def test_one_service_alone_may_start_on_one_gpu() -> None:
    topology = GpuTopology(["g0"], _services(a=60, b=60), gpus_per_node=8)
    scheduler = ElasticScheduler(topology)
    for i in range(8):
        scheduler.submit(_action(f"r{i}", "a"), 0.0)
    started = scheduler.schedule(0.0)
    # no floor: DPArrange may give single GPUs (the two services above could not)
    assert min(a.dop for a in started) == 1


def test_max_dop_caps_the_floor_and_fixed_dop_ignores_it() -> None:
    topology = GpuTopology(["g0"], _services(a=60, b=60), gpus_per_node=8)
    capped = ElasticScheduler(topology, max_dop=1)
    for i in range(4):
        capped.submit(_action(f"r{i}", "a" if i % 2 else "b"), 0.0)
    assert [a.dop for a in capped.schedule(0.0)] == [1, 1, 1, 1]

    fixed = ElasticScheduler(
        GpuTopology(["g0"], _services(a=60, b=60), gpus_per_node=8),
        algorithm="fixed-dop",
        fixed_dop=1,
    )
    for i in range(4):
        fixed.submit(_action(f"r{i}", "a" if i % 2 else "b"), 0.0)
    assert [a.dop for a in fixed.schedule(0.0)] == [1, 1, 1, 1]


def test_the_gpu_estimate_explores_the_papers_depth_options_only() -> None:
    """Alg. 2 explores the first remaining action at its first ``depth`` options; the doubling
    ladder's wide rungs assume any k released units make one k-unit allocation, which GPU
    buddy chunks do not (a CPU pool keeps the ladder: ``test_objective``)."""
    topology = GpuTopology(["g0"], _services(a=16), gpus_per_node=8)
    assert not topology.units_interchangeable
    scheduler = ElasticScheduler(topology, depth=2)
    spec = _action("x", "a")
    assert scheduler._sizing.exploration_units(spec) == (1, 2)
    scheduler.set_policy(depth=3)
    assert scheduler._sizing.exploration_units(spec) == (1, 2, 4)
