"""A live GPU pool's topology: nodes, services and service caches from the agents (§5.3)."""

from __future__ import annotations

import pytest

from workers.algorithms.tangram import ActionSpec, ResourceDemand, WaitReason
from workers.scheduler.gpu_pool import DeclaredGpuService, LiveGpuTopology, services_of
from workers.transport import NodeRegister


def register(node: str, gpus: int = 4, cache: tuple[dict[str, object], ...] = ()) -> NodeRegister:
    return NodeRegister(
        node_id=node, pool="gpu", agent_id=f"{node}:a", kind="gpu", backend="torch",
        gpus=tuple(range(gpus)), gpu_memory_mb=100,
        services={
            "rm": {"kind": "torch", "sizes": [1, 2], "device_mb": [40.0, 40.0]},
            "teacher": {"kind": "sglang", "sizes": [1, 2, 4], "device_mb": [90.0, 45.0, 22.5]},
            "broken": {"kind": "torch", "error": "OSError: no weights"},
        },
        cache=cache,
    )  # fmt: skip


def spec(action: str, service: str, gpus: int = 1) -> ActionSpec:
    return ActionSpec(
        action_id=action,
        resources={"gpu": ResourceDemand.exactly(gpus)},
        key_resource="gpu",
        service=service,
    )


def test_services_come_from_registrations_with_their_declared_memory() -> None:
    services = services_of(register("g0"))
    assert sorted(services) == ["rm", "teacher"]  # the one that failed to load is left out
    assert isinstance(services["rm"], DeclaredGpuService)
    assert services["rm"].footprint_mb(2) == 40.0  # replicated, not sharded
    assert services["teacher"].footprint_mb(4) == 22.5


def test_an_empty_pool_waits_for_nodes_then_offers_their_chunks() -> None:
    pool = LiveGpuTopology()
    assert pool.node_names == [] and pool.never_fits(spec("a", "rm")) is None
    pool.register(register("g0"))
    pool.register(register("g1", gpus=2))
    assert pool.free_counts() == (0, 1, 1, 0)
    assert pool.gpus_per_node == 4 and pool.total_gpus == 6
    assert pool.never_fits(spec("a", "nope")) == WaitReason.NOT_IN_POOL


def test_a_reported_cache_is_preferred_and_replaces_the_pools_view() -> None:
    warm = ({"service": "rm", "start": 2, "size": 1, "last_used": 10.0},)
    pool = LiveGpuTopology([register("g0", cache=warm)])
    assert pool.memory_used[("g0", 2)] == 40.0
    allocation = pool.allocate(spec("a", "rm"), "pool", {"gpu": 1}, now=20.0)
    assert (allocation.node, allocation.gpu_ids, allocation.load_seconds) == ("g0", (2,), 0.0)
    pool.adopt_cache("g0", [{"service": "teacher", "start": 0, "size": 2, "last_used": 30.0}])
    assert set(pool.cache_last_used) == {("teacher", "g0", 0, 2)}
    assert pool.memory_used[("g0", 2)] == 0.0 and pool.memory_used[("g0", 0)] == 45.0


def test_a_lost_node_withholds_its_chunks_until_it_returns() -> None:
    pool = LiveGpuTopology([register("g0")])
    running = pool.allocate(spec("a", "rm"), "pool", {"gpu": 1}, now=1.0)
    pool.set_node_available("g0", False)
    assert pool.free_counts() == (0, 0, 0, 0)
    pool.release(running.action_id, now=2.0)
    assert pool.free_counts() == (0, 0, 0, 0)  # released, but the node is still away
    pool.set_node_available("g0", True)
    assert pool.free_counts() == (0, 0, 1, 0)  # coalesced back to one chunk of 4


def test_a_restart_re_takes_the_exact_chunk() -> None:
    pool = LiveGpuTopology([register("g0")])
    allocation = pool.restore(spec("a", "teacher", 2), "g0", {"gpu": 2}, (2, 3), now=1.0)
    assert allocation.gpu_ids == (2, 3)
    assert pool.free_counts() == (0, 1, 0, 0)
    assert ("teacher", "g0", 2, 2) in pool.cache_last_used
    with pytest.raises(ValueError, match="not free"):
        pool.restore(spec("b", "rm"), "g0", {"gpu": 1}, (3,), now=1.0)


def test_a_registration_without_gpus_is_skipped_until_the_agent_sends_them() -> None:
    bare = NodeRegister(node_id="g0", pool="gpu", agent_id="a", kind="gpu", backend="torch")
    pool = LiveGpuTopology([bare])
    assert pool.node_names == []
    pool.register(register("g0"))
    assert pool.node_names == ["g0"]


def test_a_service_that_never_loaded_is_named_as_such() -> None:
    """Hosted by a node but failed to load there: the action is refused for that reason, not
    as a resource the pool does not manage; once a node loads it, it is served."""
    pool = LiveGpuTopology([register("g0")])
    assert pool.never_fits(spec("a", "broken")) == WaitReason.SERVICE_NOT_LOADED
    assert pool.load_failures["broken"] == {"g0": "OSError: no weights"}
    assert pool.never_fits(spec("a", "nope")) == WaitReason.NOT_IN_POOL
    healed = register("g1")
    healed.services["broken"] = {"kind": "torch", "sizes": [1], "device_mb": [10.0]}
    pool.register(healed)
    assert pool.never_fits(spec("a", "broken")) is None


def test_a_heartbeat_saying_nothing_is_resident_empties_the_view_and_the_stored_node() -> None:
    from workers.scheduler.nodes import NodeRegistry

    warm = ({"service": "rm", "start": 2, "size": 1, "last_used": 10.0},)
    nodes = NodeRegistry("gpu")
    nodes.gpu = LiveGpuTopology([register("g0", cache=warm)])
    nodes.nodes["g0"] = register("g0", cache=warm)
    assert nodes.heartbeat("g0", 20.0, None) is None  # a heartbeat without a cache: no change
    assert set(nodes.gpu.cache_last_used) == {("rm", "g0", 2, 1)}
    stored = nodes.heartbeat("g0", 21.0, ())  # every instance evicted
    assert stored is not None and stored.cache == ()
    assert nodes.gpu.cache_last_used == {} and nodes.gpu.memory_used[("g0", 2)] == 0.0
