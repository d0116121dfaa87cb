"""The GPU manager (§5.3): warm chunks handed out once per pass, pools of any GPU count, the
loader a pool restores with, and the exclusive cache a baseline's instances keep."""

from __future__ import annotations

import pytest

from workers.algorithms.tangram import (
    ActionSpec,
    Elasticity,
    ElasticScheduler,
    GpuServiceSpec,
    GpuTopology,
    ResourceDemand,
    WaitReason,
)
from workers.algorithms.tangram.topology.gpu import split_into_nodes


def _gpu(action_id: str, size: int, service: str = "m") -> ActionSpec:
    return ActionSpec(action_id, {"gpu": ResourceDemand.exactly(size)}, service=service)


def _warm(topology: GpuTopology, service: str, size: int, count: int) -> None:
    """Cache ``count`` instances of ``service`` at ``size`` GPUs, then free their GPUs."""
    for i in range(count):
        topology.allocate(_gpu(f"warm-{service}-{i}", size, service), "pool", {"gpu": size}, 0.0)
    for i in range(count):
        topology.release(f"warm-{service}-{i}", 1.0)


def _services() -> dict[str, GpuServiceSpec]:
    return {
        "m": GpuServiceSpec("m", 20_000, load_mb_per_s=10_000, load_overhead_s=0.5),
        "n": GpuServiceSpec("n", 20_000, load_mb_per_s=10_000, load_overhead_s=0.5),
    }


def test_each_warm_chunk_serves_one_candidate_per_pass() -> None:
    topology = GpuTopology(["g0"], _services(), gpus_per_node=8)
    _warm(topology, "m", 2, count=2)
    accommodation = topology.accommodation(2.0)
    assert accommodation.warm_chunks("m", 2) == 2
    cold = _services()["m"].load_seconds(2)
    first, second, third = (_gpu(f"a{i}", 2) for i in range(3))
    assert accommodation.restore_seconds(first, 2) == 0.0
    assert accommodation.restore_seconds(second, 2) == 0.0
    assert accommodation.restore_seconds(third, 2) == pytest.approx(cold)  # beyond the count
    # asking again (another DoP, the same DoP) does not hand out another chunk
    assert accommodation.restore_seconds(first, 2) == 0.0
    assert accommodation.restore_seconds(third, 2) == pytest.approx(cold)
    # other services and other DoPs are counted on their own
    assert accommodation.restore_seconds(_gpu("b", 2, "n"), 2) == pytest.approx(cold)
    assert accommodation.restore_seconds(third, 4) == pytest.approx(
        _services()["m"].load_seconds(4)
    )


def test_a_busy_warm_chunk_is_not_counted_and_a_new_pass_counts_afresh() -> None:
    topology = GpuTopology(["g0"], _services(), gpus_per_node=8)
    _warm(topology, "m", 4, count=2)
    topology.allocate(_gpu("busy", 4), "pool", {"gpu": 4}, 2.0)  # takes one cached chunk
    accommodation = topology.accommodation(2.0)
    assert accommodation.warm_chunks("m", 4) == 1
    assert accommodation.restore_seconds(_gpu("x", 4), 4) == 0.0
    assert accommodation.restore_seconds(_gpu("y", 4), 4) > 0.0
    again = topology.accommodation(3.0)
    assert again.restore_seconds(_gpu("y", 4), 4) == 0.0


def test_scheduler_starts_warm_candidates_without_a_restore() -> None:
    topology = GpuTopology(["g0"], _services(), gpus_per_node=8)
    _warm(topology, "m", 4, count=2)
    scheduler = ElasticScheduler(topology)
    elasticity = Elasticity.from_points({1: 1.0, 2: 0.9, 4: 0.8, 8: 0.6}, 8)
    for i in range(3):
        scheduler.submit(
            ActionSpec(
                f"r{i}",
                {"gpu": ResourceDemand.one_of([1, 2, 4, 8])},
                service="m",
                tool="m",
                key_resource="gpu",
                elasticity=elasticity,
                t1=1.0,
            ),
            2.0,
        )
    started = scheduler.schedule(2.0)
    warm = [a for a in started if a.load_seconds == 0.0]
    # two cached 4-GPU chunks: at most two candidates start warm, on exactly those chunks
    assert 1 <= len(warm) <= 2
    assert all(a.dop == 4 and a.gpu_ids in {(0, 1, 2, 3), (4, 5, 6, 7)} for a in warm)
    assert sum(a.dop for a in started) <= 8


def test_split_into_nodes() -> None:
    assert split_into_nodes(13) == [8, 4, 1]
    assert split_into_nodes(16) == [8, 8]
    assert split_into_nodes(7) == [4, 2, 1]
    assert split_into_nodes(6, node_size=4) == [4, 2]
    with pytest.raises(ValueError):
        split_into_nodes(0)


def test_nodes_of_different_sizes() -> None:
    services = {"m": GpuServiceSpec("m", 1_000)}
    topology = GpuTopology(["a", "b", "c"], services, gpus_per_node=[8, 4, 1])
    assert topology.total_gpus == 13 and topology.gpus_per_node == 8
    assert topology.free_counts() == (1, 0, 1, 1)
    assert topology.unit_counts("gpu", (1, 2, 4, 8, 16)) == (1, 2, 4, 8)
    small = topology.allocate(_gpu("s", 2), "pool", {"gpu": 2}, 0.0)
    assert small.node == "b"  # buddy best fit: the 4-GPU node splits, not the 8-GPU one
    assert topology.free_counts() == (1, 1, 0, 1)
    wide = topology.allocate(_gpu("w", 8), "pool", {"gpu": 8}, 0.0)
    assert wide.node == "a" and wide.gpu_ids == tuple(range(8))
    topology.release("s", 1.0)
    topology.release("w", 1.0)
    assert topology.free_counts() == (1, 0, 1, 1)  # coalesced up to each node's own size
    assert topology.holdings()["c"]["gpus"] == 1
    narrow = GpuTopology(["b", "c"], services, gpus_per_node=[4, 1])
    assert narrow.never_fits(_gpu("x", 8)) == WaitReason.NEVER_FITS
    with pytest.raises(ValueError):
        GpuTopology(["a", "b"], services, gpus_per_node=[8, 3])


def test_loader_times_allocations_and_the_pass_cost() -> None:
    calls: list[tuple[str, int]] = []

    def loader(service: GpuServiceSpec, gpus: int) -> float:
        calls.append((service.name, gpus))
        return 7.0

    topology = GpuTopology(["g0"], _services(), gpus_per_node=8, loader=loader)
    assert topology.accommodation(0.0).restore_seconds(_gpu("a", 2), 2) == 7.0
    assert topology.allocate(_gpu("a", 2), "pool", {"gpu": 2}, 0.0).load_seconds == 7.0
    assert calls == [("m", 2), ("m", 2)]


def test_exclusive_cache_keeps_one_instance_per_gpu() -> None:
    def run(exclusive: bool) -> GpuTopology:
        topology = GpuTopology(["g0"], _services(), gpus_per_node=1, exclusive=exclusive)
        for i, service in enumerate(("m", "n", "m")):
            topology.allocate(_gpu(f"a{i}", 1, service), "pool", {"gpu": 1}, float(i))
            topology.release(f"a{i}", float(i) + 0.5)
        return topology

    shared = run(exclusive=False)  # both 20 GB services fit in 80 GB: EOE keeps both
    assert shared.loads == 2 and shared.evictions == 0
    exclusive = run(exclusive=True)  # each load replaces the instance that was there
    assert exclusive.loads == 3 and exclusive.evictions == 2
    assert set(exclusive.cache_last_used) == {("m", "g0", 0, 1)}


def _big_services() -> dict[str, GpuServiceSpec]:
    """Two services that cannot share a GPU at DoP 1 (60 GB each in 80 GB)."""
    return {
        name: GpuServiceSpec(name, 60_000, load_mb_per_s=10_000, load_overhead_s=0.5)
        for name in ("m", "n")
    }


def test_a_cold_restore_lands_where_it_evicts_least() -> None:
    """The first free chunk by name holds ``m``; a cold ``n`` goes to the other node's empty
    chunk instead of evicting ``m`` there (Loom's refinement of §5.3's chunk choice)."""
    topology = GpuTopology(["g0", "g1"], _big_services(), gpus_per_node=1)
    _warm(topology, "m", 1, count=1)  # on g0, the first by name
    assert set(topology.cache_last_used) == {("m", "g0", 0, 1)}
    allocation = topology.allocate(_gpu("a", 1, "n"), "pool", {"gpu": 1}, 2.0)
    assert allocation.node == "g1"
    assert topology.evictions == 0
    # with both nodes holding a service, the least recently used instance goes
    topology.release("a", 3.0)
    assert topology.allocate(_gpu("b", 1, "m"), "pool", {"gpu": 1}, 4.0).node == "g0"  # warm
    topology.release("b", 5.0)
    other = GpuServiceSpec("o", 60_000, load_mb_per_s=10_000, load_overhead_s=0.5)
    topology.services["o"] = other
    assert topology.allocate(_gpu("c", 1, "o"), "pool", {"gpu": 1}, 6.0).node == "g1"
    assert ("n", "g1", 0, 1) not in topology.cache_last_used  # n was used last at 2.0


def test_a_cold_start_is_charged_the_restores_it_evicts() -> None:
    topology = GpuTopology(["g0"], _big_services(), gpus_per_node=1)
    _warm(topology, "m", 1, count=1)
    restore = _big_services()["n"].load_seconds(1)
    displaced = _big_services()["m"].load_seconds(1)
    assert topology.displaced_restores("n", 1) == pytest.approx(displaced)
    assert topology.displaced_restores("m", 1) == 0.0  # warm: nothing evicted
    accommodation = topology.accommodation(2.0)
    assert accommodation.restore_seconds(_gpu("a", 1, "n"), 1) == pytest.approx(restore + displaced)
    room = GpuTopology(["g0", "g1"], _big_services(), gpus_per_node=1)
    _warm(room, "m", 1, count=1)
    assert room.displaced_restores("n", 1) == 0.0  # g1 is empty: nothing is thrown away
