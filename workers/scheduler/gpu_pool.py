"""A GPU pool as its scheduler service runs it: the simulator's ``GpuTopology``, fed by agents.

The buddy chunks, the service-cache preference and the LRU eviction are ``GpuTopology``'s
(arl-tangram §5.3), the same object the simulator drives. What a live pool adds:

- nodes join while the pool runs (an agent registers its GPUs) and leave it (lost or drained:
  their free chunks are withheld until they come back, their running chunks finish);
- services come from the registrations: each agent says which services it hosts, the chunk
  sizes each runs on and its memory per GPU at each size;
- the service cache is the agents' truth: a registration or heartbeat replaces the pool's view
  of that node's cache (the scheduler predicts evictions with the same rule as the agent, and
  the report corrects any drift), and a rebuilt service seeds it from the stored registrations
  (recovery after ``kill -9``);
- a running action re-adopted after a restart takes back the exact chunk it holds.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from workers.algorithms.tangram import ActionSpec, Allocation, WaitReason
from workers.algorithms.tangram.dparrange import CHUNK_SIZES
from workers.algorithms.tangram.topology.gpu import GPU, GpuServiceSpec, GpuTopology
from workers.transport import NodeRegister

log = logging.getLogger("loom.scheduler")
_PLACEHOLDER = "\x00no-node"  # GpuTopology needs a node to start with; removed at once


@dataclass(frozen=True)
class DeclaredGpuService(GpuServiceSpec):
    """A service whose memory per GPU the agent declared for each chunk size (a PyTorch module
    is replicated, not sharded, so its footprint does not shrink with the chunk)."""

    per_gpu_mb: tuple[tuple[int, float], ...] = ()

    def footprint_mb(self, gpus: int) -> float:
        for size, megabytes in self.per_gpu_mb:
            if size == gpus:
                return megabytes
        return self.weights_mb / gpus


def services_of(register: NodeRegister) -> dict[str, GpuServiceSpec]:
    """The services a GPU agent registered (those that failed to load are left out)."""
    out: dict[str, GpuServiceSpec] = {}
    for name, entry in register.services.items():
        if "error" in entry:
            continue
        sizes = [int(size) for size in entry.get("sizes", ())]
        per_gpu = [float(mb) for mb in entry.get("device_mb", ())]
        if not sizes or len(sizes) != len(per_gpu):
            continue
        out[name] = DeclaredGpuService(
            name=name,
            weights_mb=per_gpu[0] * sizes[0],
            per_gpu_mb=tuple(zip(sizes, per_gpu, strict=True)),
        )
    return out


def node_size(register: NodeRegister) -> int:
    """The buddy size a node offers: its GPU count rounded down to 1, 2, 4 or 8."""
    count = len(register.gpus)
    fitting = [size for size in CHUNK_SIZES if size <= count]
    if not fitting:
        raise ValueError(f"node {register.node_id!r} registered no GPUs")
    return max(fitting)


class LiveGpuTopology(GpuTopology):
    """``GpuTopology`` whose nodes, services and cache follow the agents' registrations."""

    def __init__(self, registers: Sequence[NodeRegister] = ()) -> None:
        super().__init__([_PLACEHOLDER], {}, gpus_per_node=1, gpu_memory_mb=0.0)
        self._drop_placeholder()
        self.unavailable: set[str] = set()
        # service → node → why its weights did not load there (from the registrations)
        self.load_failures: dict[str, dict[str, str]] = {}
        for register in registers:
            self.register(register)

    def _drop_placeholder(self) -> None:
        self.node_names.remove(_PLACEHOLDER)
        del self.node_gpus[_PLACEHOLDER]
        del self.memory_used[(_PLACEHOLDER, 0)]
        self.free_chunks[0].discard((_PLACEHOLDER, 0))
        self.gpus_per_node = 0
        self.total_gpus = 0

    # --- nodes ------------------------------------------------------------------------------

    def register(self, register: NodeRegister) -> None:
        """A GPU agent (re-)announced its node: add it, take its services and its cache.

        A registration without GPUs (a store that does not keep them yet) is skipped: the
        agent's next registration, which it sends on start and periodically, brings them.
        """
        if not register.gpus:
            log.warning("GPU node %s registered without GPUs: skipped", register.node_id)
            return
        for name, spec in services_of(register).items():
            self.services.setdefault(name, spec)
        for name, entry in register.services.items():
            failures = self.load_failures.setdefault(name, {})
            if "error" in entry:
                failures[register.node_id] = str(entry["error"])
            else:
                failures.pop(register.node_id, None)
        memory = float(register.gpu_memory_mb)
        if register.node_id not in self.node_gpus:
            size = node_size(register)
            self.node_names.append(register.node_id)
            self.node_gpus[register.node_id] = size
            self.gpus_per_node = max(self.gpus_per_node, size)
            self.total_gpus += size
            for gpu in range(size):
                self.memory_used[(register.node_id, gpu)] = 0.0
            self._rebuild_free(register.node_id)
        self.gpu_memory_mb = (
            memory if len(self.node_names) == 1 else min(self.gpu_memory_mb, memory)
        )
        self.adopt_cache(register.node_id, register.cache)

    def set_node_available(self, node: str, available: bool) -> None:
        """Withhold a lost or draining node's free chunks; give them back when it returns."""
        if node not in self.node_gpus:
            return
        if available:
            self.unavailable.discard(node)
        else:
            self.unavailable.add(node)
        self._rebuild_free(node)

    def _rebuild_free(self, node: str) -> None:
        """The node's free chunks from its idle GPUs (coalesced buddies), none if withheld."""
        for level in self.free_chunks:
            for entry in [e for e in level if e[0] == node]:
                level.discard(entry)
        if node in self.unavailable:
            return
        for gpu in range(self.node_gpus[node]):
            if (node, gpu) not in self.gpu_owner:
                self._free_coalesce(node, gpu, 1)

    def release(self, action_id: str, now: float) -> None:
        chunk = self.busy.get(action_id)
        super().release(action_id, now)
        if chunk is not None and chunk[0] in self.unavailable:
            self._rebuild_free(chunk[0])

    # --- the service cache ------------------------------------------------------------------

    def adopt_cache(self, node: str, instances: Iterable[Mapping[str, Any]]) -> None:
        """Replace the pool's view of ``node``'s cache with the agent's report (§5.3)."""
        if node not in self.node_gpus:
            return
        for instance in [i for i in self.cache_last_used if i[1] == node]:
            del self.cache_last_used[instance]
        for gpu in range(self.node_gpus[node]):
            self.memory_used[(node, gpu)] = 0.0
        for entry in instances:
            service, start, size = str(entry["service"]), int(entry["start"]), int(entry["size"])
            if service not in self.services or start + size > self.node_gpus[node]:
                continue
            self.cache_last_used[(service, node, start, size)] = float(entry["last_used"])
            for gpu in range(start, start + size):
                self.memory_used[(node, gpu)] += self.services[service].footprint_mb(size)

    # --- the Topology interface where a live pool differs -----------------------------------

    def never_fits(self, spec: ActionSpec) -> WaitReason | None:
        if not self.node_names:
            return None  # no GPU node has registered yet: the action waits for one
        service = spec.service
        if service is not None and service not in self.services and self.load_failures.get(service):
            return WaitReason.SERVICE_NOT_LOADED  # hosted, but its weights never loaded
        return super().never_fits(spec)

    def restore(
        self,
        spec: ActionSpec,
        node: str,
        units: Mapping[str, int],
        core_ids: Sequence[int],
        now: float,
    ) -> Allocation:
        """Re-take the exact chunk (``core_ids`` carries a GPU pool's GPU ids) after a restart."""
        size = units[GPU]
        if not core_ids or node not in self.node_gpus:
            return self.allocate(spec, node, units, now)
        start = min(core_ids)
        for level, chunk_size in enumerate(CHUNK_SIZES):
            if chunk_size < size:
                continue
            outer = start - start % chunk_size
            if (node, outer) in self.free_chunks[level]:
                self._split_take(node, outer, chunk_size, start, size)
                break
        else:
            raise ValueError(f"GPUs {start}..{start + size - 1} of {node!r} are not free")
        self.busy[spec.action_id] = (node, start, size)
        for gpu in range(start, start + size):
            self.gpu_owner[(node, gpu)] = spec.action_id
        if spec.service is not None and spec.service in self.services:
            self._ensure_cached(spec.service, node, start, size, now)
        return Allocation(
            action_id=spec.action_id,
            node=node,
            units=dict(units),
            gpu_ids=tuple(range(start, start + size)),
            dop=size,
        )
