"""Node health and drains as the scheduler sees them, and how they show in a CPU topology."""

from __future__ import annotations

from workers.scheduler.nodes import NodeRegistry
from workers.transport import NodeRegister


def _register(node_id: str) -> NodeRegister:
    return NodeRegister(
        node_id=node_id, pool="cpu", agent_id=f"agent-{node_id}", kind="cpu", backend="local",
        cores=(0, 1), numa={0: (0, 1)}, memory_mb=1024,
    )  # fmt: skip


def _registry(*node_ids: str) -> NodeRegistry:
    registry = NodeRegistry("cpu")
    for node_id in node_ids:
        registry.adopt(_register(node_id), 0.0)
    registry.topology = registry.cpu_topology()
    return registry


def test_a_silent_node_is_lost_and_unavailable_until_it_registers_again() -> None:
    registry = _registry("a", "b")
    registry.heartbeat("b", 10.0)
    assert registry.lose_silent(12.0, timeout_s=5.0) == ["a"]
    assert registry.topology is not None and "a" in registry.topology.unavailable
    assert registry.schedulable() == ["b"]
    registry.register(_register("a"), 13.0)
    assert "a" not in registry.topology.unavailable and registry.schedulable() == ["a", "b"]


def test_a_new_node_joins_the_topology() -> None:
    registry = _registry("a")
    registry.register(_register("c"), 1.0)
    assert registry.topology is not None and "c" in registry.topology.nodes


def test_a_drain_holds_a_node_back_until_it_ends() -> None:
    registry = _registry("a", "b")
    registry.apply_drains({"a"})
    assert registry.topology is not None and "a" in registry.topology.unavailable
    registry.register(_register("a"), 1.0)  # re-registering never ends an operator's drain
    assert "a" in registry.topology.unavailable and registry.schedulable() == ["b"]
    registry.apply_drains(set())
    assert "a" not in registry.topology.unavailable


def test_an_api_pool_keeps_no_topology_in_step() -> None:
    registry = NodeRegistry("api")
    registry.register(_register("a"), 0.0)
    registry.apply_drains({"a"})
    assert registry.topology is None and registry.schedulable() == []
