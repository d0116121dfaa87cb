"""The nodes of a pool as its scheduler service sees them: registrations, heartbeats, drains.

A node is live while it heartbeats; one silent for longer than the heartbeat timeout is lost
(the service then moves its idempotent actions on, ``ActionLedger.lose_idempotent_on``) and
marked offline in the store. Operators drain nodes from the dashboard: a draining node finishes
what runs on it but takes nothing new. In a CPU pool both show in the topology: a node that is
lost or draining is unavailable to the scheduler (arl-tangram §5.2); a re-registering one is
available again unless it is draining.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from workers.algorithms.tangram import CpuNodeSpec, CpuTopology
from workers.scheduler.gpu_pool import LiveGpuTopology
from workers.transport import NodeRegister

log = logging.getLogger("loom.scheduler")


class NodeRegistry:
    def __init__(self, pool: str) -> None:
        self.pool = pool
        self.nodes: dict[str, NodeRegister] = {}
        self.last_seen: dict[str, float] = {}  # the live nodes, by their last heartbeat
        self.draining: set[str] = set()
        # The topology kept in step with the nodes (a CPU pool's); None for an API pool.
        self.topology: CpuTopology | None = None
        # A GPU pool's topology, kept in step with the nodes and their service caches.
        self.gpu: LiveGpuTopology | None = None

    def cpu_topology(self) -> CpuTopology:
        """A CPU pool's topology over the registered nodes (arl-tangram §5.2)."""
        return CpuTopology([cpu_node_spec(register) for register in self.nodes.values()])

    def gpu_topology(self) -> LiveGpuTopology:
        """A GPU pool's topology over the registered nodes, their services and the caches they
        last reported (arl-tangram §5.3)."""
        return LiveGpuTopology(list(self.nodes.values()))

    def adopt(self, register: NodeRegister, now: float) -> None:
        """A node the store knows (a rebuild): live from now until it misses heartbeats."""
        self.nodes[register.node_id] = register
        self.last_seen[register.node_id] = now

    def register(self, register: NodeRegister, now: float) -> None:
        """An agent (re-)announced its node: live now, and schedulable unless draining."""
        self.last_seen[register.node_id] = now
        known = register.node_id in self.nodes
        self.nodes[register.node_id] = register
        if self.gpu is not None:
            self.gpu.register(register)
            self.gpu.set_node_available(register.node_id, register.node_id not in self.draining)
        if self.topology is None:
            return
        if known:
            self.topology.set_node_available(
                register.node_id, register.node_id not in self.draining
            )
        else:
            self.topology.add_node(cpu_node_spec(register))

    def heartbeat(
        self, node_id: str, now: float, cache: Sequence[dict[str, Any]] | None = None
    ) -> NodeRegister | None:
        """A node is alive. A GPU node's heartbeat also reports its service cache (None: the
        agent keeps none; empty: nothing resident): the pool's view follows it, and when it
        changed, the node's registration with the new cache is returned for the store (so a
        restarted scheduler starts from it)."""
        self.last_seen[node_id] = now
        if self.gpu is None or cache is None:
            return None
        self.gpu.adopt_cache(node_id, cache)
        register = self.nodes.get(node_id)
        if register is None or register.cache == tuple(cache):
            return None
        self.nodes[node_id] = replace(register, cache=tuple(cache))
        return self.nodes[node_id]

    def lose_silent(self, now: float, timeout_s: float) -> list[str]:
        """The nodes that missed heartbeats for ``timeout_s``: no longer live nor schedulable."""
        lost = [node for node, seen in self.last_seen.items() if now - seen > timeout_s]
        for node in lost:
            del self.last_seen[node]
            log.warning("node %s missed heartbeats for %.0f s: lost", node, timeout_s)
            if self.topology is not None:
                self.topology.set_node_available(node, False)
            if self.gpu is not None:
                self.gpu.set_node_available(node, False)
        return lost

    def apply_drains(self, draining: set[str]) -> None:
        """The nodes an operator drains now: running actions finish, nothing new lands."""
        if draining == self.draining:
            return
        if self.topology is not None:
            for node in draining - self.draining:
                if node in self.topology.nodes:
                    self.topology.set_node_available(node, False)
            for node in self.draining - draining:
                if node in self.topology.nodes and node in self.last_seen:
                    self.topology.set_node_available(node, True)
        if self.gpu is not None:
            for node in draining - self.draining:
                self.gpu.set_node_available(node, False)
            for node in self.draining - draining:
                self.gpu.set_node_available(node, node in self.last_seen)
        log.info("pool %s: draining %s", self.pool, sorted(draining) or "no node")
        self.draining = draining

    def schedulable(self) -> list[str]:
        """The live nodes not draining, in name order."""
        return sorted(
            node for node in self.nodes if node in self.last_seen and node not in self.draining
        )


def cpu_node_spec(register: NodeRegister) -> CpuNodeSpec:
    numa = register.numa or {0: register.cores}
    groups = tuple(tuple(cores) for _, cores in sorted(numa.items()))
    return CpuNodeSpec(name=register.node_id, numa_cores=groups, memory_mb=register.memory_mb)
