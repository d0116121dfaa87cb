"""Topology behaviour: NUMA placement and trajectory pinning (§5.2), buddy chunks and the
service cache (§5.3), concurrency and quotas (§5.1)."""

from __future__ import annotations

import pytest

from workers.algorithms.tangram import (
    ActionSpec,
    BasicLimit,
    BasicTopology,
    CpuNodeSpec,
    CpuTopology,
    GpuServiceSpec,
    GpuTopology,
    ResourceDemand,
    WaitReason,
)


def _cpu(action_id: str, cores: int, memory: int = 0, trajectory: str | None = None) -> ActionSpec:
    resources = {"cpu": ResourceDemand.exactly(cores)}
    if memory:
        resources["memory_mb"] = ResourceDemand.exactly(memory)
    return ActionSpec(action_id, resources, trajectory_id=trajectory)


def test_cores_stay_within_one_numa_node_when_they_fit() -> None:
    topology = CpuTopology([CpuNodeSpec.uniform("n0", cores=16, numa_nodes=4, memory_mb=1000)])
    first = topology.allocate(_cpu("a", 3), "n0", {"cpu": 3}, 0.0)
    second = topology.allocate(_cpu("b", 4), "n0", {"cpu": 4}, 0.0)
    numa = {c: c // 4 for c in range(16)}
    assert len({numa[c] for c in first.core_ids}) == 1
    assert len({numa[c] for c in second.core_ids}) == 1
    # best fit: the 1 core left next to "a" serves a 1-core action, keeping whole NUMA nodes free
    third = topology.allocate(_cpu("c", 1), "n0", {"cpu": 1}, 0.0)
    assert numa[third.core_ids[0]] == numa[first.core_ids[0]]
    wide = topology.allocate(_cpu("d", 8), "n0", {"cpu": 8}, 0.0)
    assert len(set(wide.core_ids)) == 8
    assert not set(wide.core_ids) & set(first.core_ids + second.core_ids + third.core_ids)
    topology.release("a", 1.0)
    assert topology.nodes["n0"].free_cores == 16 - 3 - 4 - 1 - 8 + 3


def test_trajectory_picks_node_by_memory_and_stays_there() -> None:
    nodes = [CpuNodeSpec.uniform(f"n{i}", 8, 2, memory_mb=10_000) for i in range(2)]
    topology = CpuTopology(nodes)
    acc = topology.accommodation(0.0)
    placed = acc.add(_cpu("a1", 1, 6000, "t1"), {"cpu": 1, "memory_mb": 6000})
    topology.allocate(_cpu("a1", 1, 6000, "t1"), placed.group, {"cpu": 1, "memory_mb": 6000}, 0)
    acc = topology.accommodation(0.0)
    other = acc.add(_cpu("b1", 1, 6000, "t2"), {"cpu": 1, "memory_mb": 6000})
    assert other.group != placed.group  # load balance: the node with more free memory
    topology.release("a1", 1.0)
    acc = topology.accommodation(1.0)
    again = acc.add(_cpu("a2", 1, 6000, "t1"), {"cpu": 1, "memory_mb": 6000})
    assert again.group == placed.group  # pinned
    assert topology.nodes[str(placed.group)].free_memory_mb == 4000  # reserved for t1's life
    topology.end_trajectory("t1", 2.0)
    assert topology.nodes[str(placed.group)].free_memory_mb == 10_000


def test_cpu_blocked_reasons() -> None:
    topology = CpuTopology([CpuNodeSpec.uniform("n0", 4, 1, memory_mb=100)])
    acc = topology.accommodation(0.0)
    assert acc.add(_cpu("a", 4), {"cpu": 4}).group == "n0"
    blocked = acc.add(_cpu("b", 1), {"cpu": 1})
    assert getattr(blocked, "reason", None) == WaitReason.NO_CORES
    acc = topology.accommodation(0.0)
    blocked = acc.add(_cpu("c", 1, 500), {"cpu": 1, "memory_mb": 500})
    assert getattr(blocked, "reason", None) == WaitReason.NO_MEMORY
    assert topology.never_fits(_cpu("d", 5)) == WaitReason.NEVER_FITS


def _gpu(action_id: str, size: int, service: str = "m") -> ActionSpec:
    return ActionSpec(action_id, {"gpu": ResourceDemand.exactly(size)}, service=service)


def _layout_ok(topology: GpuTopology) -> None:
    used: set[tuple[str, int]] = set()
    for level, chunks in enumerate(topology.free_chunks):
        size = 1 << level
        for node, start in chunks:
            assert start % size == 0
            for g in range(start, start + size):
                assert (node, g) not in used
                used.add((node, g))
            if size < topology.gpus_per_node:
                assert (node, start ^ size) not in chunks, "free buddies must coalesce"
    for node, start, size in topology.busy.values():
        assert start % size == 0
        for g in range(start, start + size):
            assert (node, g) not in used
            used.add((node, g))


def test_buddy_split_and_coalesce() -> None:
    topology = GpuTopology(["n0"], {"m": GpuServiceSpec("m", 1000)}, gpus_per_node=8)
    one = topology.allocate(_gpu("a", 1), "pool", {"gpu": 1}, 0.0)
    assert topology.free_counts() == (1, 1, 1, 0)
    two = topology.allocate(_gpu("b", 2), "pool", {"gpu": 2}, 0.0)
    assert two.gpu_ids == (2, 3) and one.gpu_ids == (0,)
    _layout_ok(topology)
    topology.release("a", 1.0)
    topology.release("b", 1.0)
    assert topology.free_counts() == (0, 0, 0, 1)
    _layout_ok(topology)


def test_prefers_chunk_caching_the_service_and_evicts_lru() -> None:
    services = {
        "m": GpuServiceSpec("m", 60_000, load_mb_per_s=10_000, load_overhead_s=0.5),
        "n": GpuServiceSpec("n", 60_000),
    }
    topology = GpuTopology(["n0"], services, gpus_per_node=2, gpu_memory_mb=80_000)
    first = topology.allocate(_gpu("a", 1, "m"), "pool", {"gpu": 1}, 0.0)
    assert first.load_seconds == pytest.approx(0.5 + 6.0)
    topology.allocate(_gpu("b", 1, "n"), "pool", {"gpu": 1}, 0.0)
    topology.release("a", 1.0)
    topology.release("b", 1.0)
    again = topology.allocate(_gpu("c", 1, "n"), "pool", {"gpu": 1}, 2.0)
    assert again.load_seconds == 0.0  # went to the GPU that caches "n"
    assert again.gpu_ids == (1,)
    topology.release("c", 3.0)
    # m on 2 GPUs is a distinct instance needing 30 GB per GPU: both 60 GB residents must go,
    # the least recently used (m@0, used at t=0) first
    wide = topology.allocate(_gpu("d", 2, "m"), "pool", {"gpu": 2}, 4.0)
    assert wide.load_seconds > 0
    assert set(topology.cache_last_used) == {("m", "n0", 0, 2)}
    assert topology.evictions == 2
    assert all(v <= 80_000 for v in topology.memory_used.values())


def test_quota_and_concurrency() -> None:
    topology = BasicTopology({"api:s": BasicLimit(concurrency=2, quota=3, period_s=10.0)})
    spec = ActionSpec("a", {"api:s": ResourceDemand.exactly(1)})
    acc = topology.accommodation(0.0)
    assert acc.add(spec, {"api:s": 1}).group == "api:s"
    assert acc.add(spec, {"api:s": 1}).group == "api:s"
    assert getattr(acc.add(spec, {"api:s": 1}), "reason", None) == WaitReason.CONCURRENCY
    for i in range(3):
        topology.allocate(ActionSpec(f"x{i}", spec.resources), "api:s", {"api:s": 1}, 0.0)
        topology.release(f"x{i}", 0.5)
    acc = topology.accommodation(1.0)
    assert getattr(acc.add(spec, {"api:s": 1}), "reason", None) == WaitReason.QUOTA
    assert topology.next_change(1.0) == 10.0
    acc = topology.accommodation(10.0)
    assert acc.add(spec, {"api:s": 1}).group == "api:s"
    assert topology.violations == 0


def test_api_limits_change_live() -> None:
    topology = BasicTopology({"api:s": BasicLimit(concurrency=2)})
    spec = ActionSpec("a", {"api:s": ResourceDemand.exactly(1)})
    topology.allocate(ActionSpec("held", spec.resources), "api:s", {"api:s": 1}, 0.0)
    topology.set_limit("api:s", BasicLimit(concurrency=1))  # an operator lowers the limit
    acc = topology.accommodation(1.0)
    assert getattr(acc.add(spec, {"api:s": 1}), "reason", None) == WaitReason.CONCURRENCY
    topology.release("held", 2.0)
    assert topology.accommodation(2.0).add(spec, {"api:s": 1}).group == "api:s"
    topology.set_limit("api:new", BasicLimit(quota=5, period_s=60.0))  # a new API appears
    assert "api:new" in topology.resource_names and topology.free("api:new", 3.0)[1] == 5
