"""CPU manager via allocate-on-execution (arl-tangram §5.2).

Cores are grouped by NUMA node; each core is held by one action at a time; an action's cores are
taken inside one NUMA node when they fit (best fit: the NUMA node with the fewest free cores that
still holds them, which keeps large NUMA blocks whole for wide elastic actions), otherwise
spread over the NUMA nodes with the most free cores. Memory is coupled to cores: the first
action of a trajectory picks a node among those with enough free cores *and* enough memory for
the whole trajectory, by memory load balance (most free memory, as a fraction), and reserves
that memory until :meth:`CpuTopology.end_trajectory`; later actions of the trajectory stay on
that node. Every node is its own scheduling group ("CPU Manager independently performs the
scheduling algorithms for each node").
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from workers.algorithms.tangram.action import ActionSpec
from workers.algorithms.tangram.dparrange import BasicDPOperator
from workers.algorithms.tangram.topology.base import (
    Accommodation,
    Allocation,
    Blocked,
    Placement,
    Topology,
    WaitReason,
)

CPU = "cpu"
MEMORY = "memory_mb"
_CPU_RESOURCES = frozenset({CPU, MEMORY})


@dataclass(frozen=True)
class CpuNodeSpec:
    """A machine: core ids per NUMA node, and memory in MiB."""

    name: str
    numa_cores: tuple[tuple[int, ...], ...]
    memory_mb: int

    @classmethod
    def uniform(cls, name: str, cores: int, numa_nodes: int, memory_mb: int) -> CpuNodeSpec:
        if cores <= 0 or numa_nodes <= 0 or cores % numa_nodes:
            raise ValueError(f"{cores} cores do not split evenly over {numa_nodes} NUMA nodes")
        per = cores // numa_nodes
        groups = tuple(tuple(range(i * per, (i + 1) * per)) for i in range(numa_nodes))
        return cls(name=name, numa_cores=groups, memory_mb=memory_mb)

    @property
    def cores(self) -> int:
        return sum(len(g) for g in self.numa_cores)


@dataclass
class _Held:
    node: str
    cores: tuple[int, ...]
    memory_mb: int  # held for this action only (0 when the trajectory holds the memory)


class _NodeState:
    def __init__(self, spec: CpuNodeSpec) -> None:
        self.spec = spec
        self.free_by_numa: list[list[int]] = [sorted(g) for g in spec.numa_cores]
        self.numa_of = {c: i for i, g in enumerate(spec.numa_cores) for c in g}
        self.free_cores = spec.cores
        self.free_memory_mb = spec.memory_mb

    def take_cores(self, count: int) -> tuple[int, ...]:
        fitting = [i for i, free in enumerate(self.free_by_numa) if len(free) >= count]
        if fitting:
            numa = min(fitting, key=lambda i: (len(self.free_by_numa[i]), i))
            taken = self.free_by_numa[numa][:count]
            del self.free_by_numa[numa][:count]
        else:
            taken = []
            for numa in sorted(
                range(len(self.free_by_numa)), key=lambda i: -len(self.free_by_numa[i])
            ):
                need = count - len(taken)
                if need == 0:
                    break
                part = self.free_by_numa[numa][:need]
                del self.free_by_numa[numa][: len(part)]
                taken.extend(part)
            if len(taken) < count:
                self.put_cores(taken)
                raise RuntimeError(f"node {self.spec.name}: {count} cores requested, not free")
        self.free_cores -= count
        return tuple(taken)

    def take_exact(self, cores: Sequence[int]) -> tuple[int, ...]:
        """Take these very cores (restoring a running action after a restart)."""
        for core in cores:
            free = self.free_by_numa[self.numa_of[core]]
            index = bisect.bisect_left(free, core)
            if index == len(free) or free[index] != core:
                raise RuntimeError(f"node {self.spec.name}: core {core} is not free")
            del free[index]
        self.free_cores -= len(cores)
        return tuple(cores)

    def put_cores(self, cores: Sequence[int]) -> None:
        for core in cores:
            bisect.insort(self.free_by_numa[self.numa_of[core]], core)
        self.free_cores += len(cores)


class CpuTopology(Topology):
    """CPU nodes with NUMA-grouped cores and memory; trajectories pinned to a node."""

    kind = "cpu"

    def __init__(self, nodes: Sequence[CpuNodeSpec]) -> None:
        names = [n.name for n in nodes]
        if len(set(names)) != len(names):
            raise ValueError("node names must be unique")
        self.nodes = {n.name: _NodeState(n) for n in nodes}
        self.trajectory_node: dict[str, str] = {}
        self.trajectory_memory: dict[str, int] = {}
        self._held: dict[str, _Held] = {}
        self.unavailable: set[str] = set()

    @property
    def resource_names(self) -> frozenset[str]:
        return _CPU_RESOURCES

    def add_node(self, spec: CpuNodeSpec) -> None:
        """A node registered while the pool runs (agents join at any time)."""
        if spec.name in self.nodes:
            raise ValueError(f"node {spec.name!r} is already in the pool")
        self.nodes[spec.name] = _NodeState(spec)

    def set_node_available(self, name: str, available: bool) -> None:
        """Take a node out of placement (lost agent, drained) or put it back.

        Trajectories pinned to a node that goes away are unpinned, so their retried and later
        actions can land elsewhere (their sandbox state is lost with the node).
        """
        if name not in self.nodes:
            raise KeyError(f"no node {name!r}")
        if available:
            self.unavailable.discard(name)
            return
        self.unavailable.add(name)
        for trajectory in [t for t, n in self.trajectory_node.items() if n == name]:
            del self.trajectory_node[trajectory]
            self.nodes[name].free_memory_mb += self.trajectory_memory.pop(trajectory, 0)

    @property
    def arranged_resources(self) -> tuple[str, ...]:
        return (CPU,)

    def unit_counts(self, resource: str, counts: Sequence[int]) -> tuple[int, ...]:
        """An action runs on one node (§5.2): no more cores than the largest node has."""
        if resource != CPU or not self.nodes:
            return tuple(counts)
        largest = max(state.spec.cores for state in self.nodes.values())
        return tuple(u for u in counts if u <= largest)

    def min_dop_cap(self, resource: str) -> int | None:
        if resource != CPU or not self.nodes:
            return None
        return min(state.spec.cores for state in self.nodes.values())

    def never_fits(self, spec: ActionSpec) -> WaitReason | None:
        if any(name not in self.resource_names for name in spec.resources):
            return WaitReason.NOT_IN_POOL
        if not self.nodes:
            return None  # no agent has registered yet: wait for one rather than reject
        cores = spec.resources[CPU].minimum if CPU in spec.resources else 0
        memory = spec.resources[MEMORY].minimum if MEMORY in spec.resources else 0
        node_name = self.trajectory_node.get(spec.trajectory_id or "")
        states = [self.nodes[node_name]] if node_name else list(self.nodes.values())
        for state in states:
            if cores <= state.spec.cores and (node_name or memory <= state.spec.memory_mb):
                return None
        return WaitReason.NEVER_FITS

    def accommodation(self, now: float) -> _CpuAccommodation:
        return _CpuAccommodation(self)

    def allocate(
        self, spec: ActionSpec, group: Hashable, units: Mapping[str, int], now: float
    ) -> Allocation:
        node_name = str(group)
        state = self.nodes[node_name]
        trajectory = spec.trajectory_id
        memory = units.get(MEMORY, 0)
        action_memory = 0
        if trajectory is not None:
            bound = self.trajectory_node.get(trajectory)
            if bound is None:
                self.trajectory_node[trajectory] = node_name
                self.trajectory_memory[trajectory] = memory
                state.free_memory_mb -= memory
            elif bound != node_name:
                raise RuntimeError(f"trajectory {trajectory} is pinned to {bound}, not {node_name}")
        else:
            action_memory = memory
            state.free_memory_mb -= memory
        cores = state.take_cores(units.get(CPU, 0))
        self._held[spec.action_id] = _Held(node_name, cores, action_memory)
        return Allocation(
            action_id=spec.action_id,
            node=node_name,
            units=dict(units),
            core_ids=cores,
            dop=max(1, len(cores)),
        )

    def restore(
        self,
        spec: ActionSpec,
        node: str,
        units: Mapping[str, int],
        core_ids: Sequence[int],
        now: float,
    ) -> Allocation:
        state = self.nodes[node]
        memory = units.get(MEMORY, 0)
        action_memory = 0
        trajectory = spec.trajectory_id
        if trajectory is not None and trajectory not in self.trajectory_node:
            self.trajectory_node[trajectory] = node
            self.trajectory_memory[trajectory] = memory
            state.free_memory_mb -= memory
        elif trajectory is None:
            action_memory = memory
            state.free_memory_mb -= memory
        cores = state.take_exact(core_ids)
        self._held[spec.action_id] = _Held(node, cores, action_memory)
        return Allocation(
            action_id=spec.action_id, node=node, units=dict(units), core_ids=cores, dop=len(cores)
        )

    def release(self, action_id: str, now: float) -> None:
        held = self._held.pop(action_id, None)
        if held is None:
            return
        state = self.nodes[held.node]
        state.put_cores(held.cores)
        state.free_memory_mb += held.memory_mb

    def end_trajectory(self, trajectory_id: str, now: float) -> None:
        node_name = self.trajectory_node.pop(trajectory_id, None)
        if node_name is not None:
            self.nodes[node_name].free_memory_mb += self.trajectory_memory.pop(trajectory_id, 0)

    def holdings(self) -> dict[str, dict[str, object]]:
        out: dict[str, dict[str, object]] = {}
        for name, state in self.nodes.items():
            running = {a: len(h.cores) for a, h in self._held.items() if h.node == name}
            out[name] = {
                "cores": state.spec.cores,
                "free_cores": state.free_cores,
                "free_cores_by_numa": [len(f) for f in state.free_by_numa],
                "memory_mb": state.spec.memory_mb,
                "free_memory_mb": state.free_memory_mb,
                "trajectories": sum(1 for n in self.trajectory_node.values() if n == name),
                "actions": running,
            }
        return out

    def core_owners(self) -> dict[tuple[str, int], str]:
        """(node, core) -> action id, for invariant checks."""
        owners: dict[tuple[str, int], str] = {}
        for action_id, held in self._held.items():
            for core in held.cores:
                if (held.node, core) in owners:
                    raise AssertionError(f"core {core} on {held.node} held twice")
                owners[(held.node, core)] = action_id
        return owners


class _CpuAccommodation(Accommodation):
    def __init__(self, topology: CpuTopology) -> None:
        self.topology = topology
        self.start_cores = {n: s.free_cores for n, s in topology.nodes.items()}
        self.cores = dict(self.start_cores)
        self.memory = {n: s.free_memory_mb for n, s in topology.nodes.items()}
        self.capacity = {n: s.spec.memory_mb for n, s in topology.nodes.items()}
        self.pending_trajectory: dict[str, str] = {}
        self.placed: dict[str, str] = {}
        self.closed: set[str] = set(topology.unavailable)

    def add(self, spec: ActionSpec, units: Mapping[str, int]) -> Placement | Blocked:
        cores = units.get(CPU, 0)
        memory = units.get(MEMORY, 0)
        trajectory = spec.trajectory_id
        bound = None
        if trajectory is not None:
            bound = self.topology.trajectory_node.get(trajectory) or self.pending_trajectory.get(
                trajectory
            )
        if bound is not None:
            if bound in self.closed or self.cores[bound] < cores:
                self.closed.add(bound)
                return Blocked(WaitReason.NO_CORES, bound)
            self.cores[bound] -= cores
            self.placed[spec.action_id] = bound
            return Placement(group=bound)
        open_nodes = [n for n in self.cores if n not in self.closed and self.cores[n] >= cores]
        fitting = [n for n in open_nodes if self.memory[n] >= memory]
        if not fitting:
            reason = WaitReason.NO_MEMORY if open_nodes else WaitReason.NO_CORES
            return Blocked(reason, None)
        node = max(fitting, key=lambda n: (self.memory[n] / self.capacity[n], self.cores[n]))
        self.cores[node] -= cores
        self.memory[node] -= memory
        if trajectory is not None:
            self.pending_trajectory[trajectory] = node
        self.placed[spec.action_id] = node
        return Placement(group=node)

    def dp_operator(
        self, group: Hashable, resource: str, fixed: Sequence[tuple[ActionSpec, Mapping[str, int]]]
    ) -> BasicDPOperator:
        if resource != CPU:
            raise ValueError(f"CPU topology scales only {CPU!r}, not {resource!r}")
        node = str(group)
        used = sum(u.get(CPU, 0) for s, u in fixed if self.placed.get(s.action_id) == node)
        return BasicDPOperator(max(0, self.start_cores[node] - used))

    def all_groups_closed(self) -> bool:
        return len(self.closed) == len(self.cores)
