"""GPU manager via evict-on-execution (arl-tangram §5.3).

*Pool*: GPUs are handed out as buddy chunks ``(start, start + 2^a)`` with ``start`` divisible by
``2^a`` (a multi-level cell structure after HiveD). Each node starts as one free chunk; an
allocation of ``m`` GPUs takes the smallest free level ``b ≥ a`` (``2^(a-1) < m ≤ 2^a``),
splitting it when ``b > a``; among chunks of that level the one already caching the requested
service wins. Released chunks coalesce with their free buddy.

*Breakdown*: every service keeps an invariant copy in CPU memory; a chunk that does not cache the
service restores it (the topology's ``loader`` gives the seconds, added to the action), evicting
least-recently-used cached services from the chunk's GPUs until the service's per-GPU footprint
fits. Different DoPs of a service are distinct cached instances. At most one action runs on a GPU
at any time.

Nodes may differ in size (1, 2, 4 or 8 GPUs each), so a pool can be any number of GPUs: whole
nodes plus a part of one, as a share of a cluster is.

*DoP floor* (Loom's own, :meth:`GpuTopology.dop_floors`): an elastic action starts no narrower
than the narrowest chunk that could cache every service the pool is serving at once, so narrow
cold starts do not evict each other's instances (the cache dithering §5.3's LRU is meant to
reduce); the floor yields to the widest free chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from workers.algorithms.tangram.action import ActionSpec
from workers.algorithms.tangram.dparrange import (
    CHUNK_SIZES,
    GpuChunkDPOperator,
    chunk_take,
)
from workers.algorithms.tangram.topology.base import (
    Accommodation,
    Allocation,
    Blocked,
    Placement,
    Topology,
    WaitReason,
)

GPU = "gpu"
GPU_MEMORY = "gpu_memory_mb"
_LEVEL = {1: 0, 2: 1, 4: 2, 8: 3}

Chunk = tuple[str, int, int]  # (node, start, size)
Instance = tuple[str, str, int, int]  # (service, node, start, size)
K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class GpuServiceSpec:
    """A GPU service (reward model, teacher): total weight memory and restore speed.

    ``load_seconds(m) = load_overhead_s + (weights_mb / m) / load_mb_per_s`` — each of the ``m``
    GPUs restores its tensor-parallel shard from pinned CPU memory in parallel.
    """

    name: str
    weights_mb: float
    load_mb_per_s: float = 10_000.0
    load_overhead_s: float = 0.5

    def footprint_mb(self, gpus: int) -> float:
        return self.weights_mb / gpus

    def load_seconds(self, gpus: int) -> float:
        return self.load_overhead_s + self.footprint_mb(gpus) / self.load_mb_per_s


# Seconds to bring a service onto ``gpus`` GPUs: EOE's restore from pinned CPU memory
# (``GpuServiceSpec.load_seconds``, the default) or another system's loader (a baseline's).
Loader = Callable[[GpuServiceSpec, int], float]


def pinned_memory_restore(service: GpuServiceSpec, gpus: int) -> float:
    """§5.3: every GPU of the chunk restores its shard from the invariant CPU-memory copy."""
    return service.load_seconds(gpus)


@dataclass(frozen=True)
class CachedInstance:
    """A service instance resident on one node's GPUs ``start .. start + size``."""

    last_used: float
    start: int
    size: int
    per_gpu_mb: float


def lru_evictions(
    resident: Mapping[K, CachedInstance],
    memory_used: Mapping[int, float],
    capacity_mb: float,
    start: int,
    size: int,
    need_mb: float,
    exclusive: bool = False,
) -> list[K]:
    """The instances to evict, least recently used first, so that ``need_mb`` more fits on each
    GPU of ``start .. start + size`` (arl-tangram §5.3: EOE with LRU eviction).

    Only instances overlapping the chunk are candidates (the rest hold other GPUs); ties on
    ``last_used`` break by key so the simulator and the agents evict the same instance.
    ``exclusive``: a GPU keeps only the newest instance (a baseline's model ownership), so every
    overlapping instance goes. Evicting all of them may still not make room (the footprint alone
    exceeds a GPU): the caller decides whether that is an error.
    """
    used = dict(memory_used)
    overlapping = sorted(
        (
            (key, inst)
            for key, inst in resident.items()
            if inst.start < start + size and start < inst.start + inst.size
        ),
        key=lambda item: (item[1].last_used, item[0]),
    )
    victims: list[K] = []
    for key, inst in overlapping:
        fits = all(used[g] + need_mb <= capacity_mb for g in range(start, start + size))
        if fits and not exclusive:
            break
        victims.append(key)
        for g in range(inst.start, inst.start + inst.size):
            used[g] -= inst.per_gpu_mb
    return victims


def split_into_nodes(gpus: int, node_size: int = 8) -> list[int]:
    """Node sizes for a pool of ``gpus`` GPUs: whole ``node_size`` nodes, then the remainder as
    buddy-sized parts (e.g. 13 -> [8, 4, 1])."""
    if gpus < 1 or node_size not in CHUNK_SIZES:
        raise ValueError(f"need gpus >= 1 and node_size in {CHUNK_SIZES}")
    sizes = [node_size] * (gpus // node_size)
    rest = gpus % node_size
    sizes += [size for size in reversed(CHUNK_SIZES) if rest & size]
    return sizes


class GpuTopology(Topology):
    """Nodes of 1, 2, 4 or 8 GPUs with a per-GPU service cache.

    ``gpus_per_node``: one size for every node, or one per node (in ``node_names`` order).
    ``loader``: the seconds a service takes to come onto a chunk (default: EOE's restore).
    ``exclusive``: a GPU keeps only the instance loaded last, whatever memory is left (a system
    whose model instances own their GPUs, as a baseline's); False is EOE's shared cache.
    """

    kind = "gpu"
    units_interchangeable = False  # an allocation of k GPUs needs one free buddy chunk of k

    def __init__(
        self,
        node_names: Sequence[str],
        services: Mapping[str, GpuServiceSpec],
        gpus_per_node: int | Sequence[int] = 8,
        gpu_memory_mb: float = 80_000.0,
        prefer_cached: bool = True,
        loader: Loader = pinned_memory_restore,
        exclusive: bool = False,
    ) -> None:
        if not node_names or len(set(node_names)) != len(node_names):
            raise ValueError("need at least one node, names unique")
        sizes = (
            [gpus_per_node] * len(node_names)
            if isinstance(gpus_per_node, int)
            else list(gpus_per_node)
        )
        if len(sizes) != len(node_names) or any(size not in CHUNK_SIZES for size in sizes):
            raise ValueError(f"each node needs a size in {CHUNK_SIZES}, got {gpus_per_node}")
        self.node_names = list(node_names)
        self.node_gpus = dict(zip(self.node_names, sizes, strict=True))
        self.gpus_per_node = max(sizes)  # the widest chunk one action can get
        self.total_gpus = sum(sizes)
        self.gpu_memory_mb = gpu_memory_mb
        self.services = dict(services)
        self.prefer_cached = prefer_cached
        self.loader = loader
        self.exclusive = exclusive
        self.free_chunks: list[set[tuple[str, int]]] = [set() for _ in CHUNK_SIZES]
        for name, size in self.node_gpus.items():
            self.free_chunks[_LEVEL[size]].add((name, 0))
        self.busy: dict[str, Chunk] = {}
        self.gpu_owner: dict[tuple[str, int], str] = {}
        self.cache_last_used: dict[Instance, float] = {}
        self.memory_used: dict[tuple[str, int], float] = {
            (n, g): 0.0 for n, size in self.node_gpus.items() for g in range(size)
        }
        self.loading_until: dict[str, float] = {}
        self.loads = 0
        self.evictions = 0

    @property
    def resource_names(self) -> frozenset[str]:
        return frozenset({GPU, GPU_MEMORY})

    def free_counts(self) -> tuple[int, int, int, int]:
        a, b, c, d = (len(s) for s in self.free_chunks)
        return (a, b, c, d)

    @property
    def arranged_resources(self) -> tuple[str, ...]:
        return (GPU,)

    def unit_counts(self, resource: str, counts: Sequence[int]) -> tuple[int, ...]:
        """Only buddy chunks inside one node can be handed out (§5.3)."""
        if resource != GPU:
            return tuple(counts)
        return tuple(u for u in counts if u in CHUNK_SIZES and u <= self.gpus_per_node)

    def never_fits(self, spec: ActionSpec) -> WaitReason | None:
        if (
            any(name not in self.resource_names for name in spec.resources)
            or GPU not in spec.resources
        ):
            return WaitReason.NOT_IN_POOL
        if spec.service is None or spec.service not in self.services:
            return WaitReason.NOT_IN_POOL
        demand = spec.resources[GPU]
        options = [k for k in demand.options() if k in CHUNK_SIZES and k <= self.gpus_per_node]
        service = self.services[spec.service]
        if not any(service.footprint_mb(k) <= self.gpu_memory_mb for k in options):
            return WaitReason.NEVER_FITS
        if demand.minimum not in options:
            return WaitReason.NEVER_FITS
        return None

    def dop_floors(self, specs: Iterable[ActionSpec]) -> dict[str, int]:
        """The GPU floor of a pass: :meth:`resident_dop` of the services ``specs`` name (the
        running actions and the head of the queue), lowered to the widest free chunk when none
        that wide is free; none when that is one GPU.

        The lowering is Loom's rule, as ``min_dop_cap`` is for a policy's ``min_dop``: a floor
        above every free chunk would leave the pass with free GPUs no waiting action may take
        (a node narrower than the floor, or the free half of a node whose other half runs an
        action), which idles them until a whole wide chunk frees.
        """
        floor = self.resident_dop({spec.service for spec in specs if spec.service is not None})
        widest_free = max(
            (size for size, free in zip(CHUNK_SIZES, self.free_chunks, strict=True) if free),
            default=floor,
        )
        floor = min(floor, widest_free)
        return {GPU: floor} if floor > 1 else {}

    def resident_dop(self, services: Iterable[str]) -> int:
        """The narrowest chunk on whose every GPU all of ``services`` could be cached at once:
        the least ``k`` with ``sum(footprint_mb(k)) <= gpu_memory_mb``, at most the widest node.

        Loom's own prior on a GPU action's DoP (arl-tangram §4.1 lets priors narrow the
        feasible set), from §5.3's memory model: different DoPs and placements of a service
        are distinct cached instances, and GPU memory cannot hold them all. When the services
        the pool is serving do not fit together on a narrower chunk, a narrow start restores
        its own instance and LRU-evicts the others' from its GPUs, so the next actions of
        those services restore again and the cache dithers instead of serving (the
        restore-bound thrashing §5.3's LRU is meant to reduce). At this DoP or wider, a chunk
        can keep every one of them warm; the DP still chooses among the wider DoPs.
        """
        names = set(services) & self.services.keys()
        need = sum(self.services[name].weights_mb for name in names)
        for size in CHUNK_SIZES:
            if size >= self.gpus_per_node or need <= size * self.gpu_memory_mb:
                return size
        return self.gpus_per_node

    def accommodation(self, now: float) -> _GpuAccommodation:
        return _GpuAccommodation(self, now)

    # --- buddy chunks -----------------------------------------------------------------------

    def _pick_chunk(self, size: int, service: str | None) -> tuple[str, int, int, int]:
        """``(node, chunk_start, chunk_size, sub_start)``: the smallest fitting level; within it a
        sub-chunk already caching ``service`` (most recently used first), else the one whose
        restore evicts least (:meth:`_eviction_damage`)."""
        for level in range(_LEVEL[size], 4):
            chunk_size = CHUNK_SIZES[level]
            free = self.free_chunks[level]
            if not free:
                continue
            best: tuple[tuple[float, ...], str, int, int] | None = None
            for node, start in sorted(free):
                for sub in range(start, start + chunk_size, size):
                    rank = self._chunk_rank(service, node, sub, size)
                    if best is None or rank < best[0]:
                        best = (rank, node, start, sub)
                if not self.prefer_cached:
                    break
            assert best is not None
            _, node, start, sub = best
            return node, start, chunk_size, sub
        raise RuntimeError(f"no free chunk of {size} GPUs")

    def _chunk_rank(self, service: str | None, node: str, sub: int, size: int) -> tuple[float, ...]:
        """Lower is better: a chunk caching ``service`` (most recently used first, §5.3's
        preference), then — Loom's own refinement — the chunk whose restore evicts the fewest
        and the least recently used instances, so a cold restore lands where it destroys the
        least warm state instead of on the first free chunk by name."""
        if not self.prefer_cached or service is None:
            return (0.0,)
        used = self.cache_last_used.get((service, node, sub, size))
        if used is not None:
            return (0.0, -used)
        victims = self._restore_victims(service, node, sub, size)
        newest = max((self.cache_last_used[v] for v in victims), default=float("-inf"))
        return (1.0, float(len(victims)), newest)

    def _restore_victims(self, service: str, node: str, start: int, size: int) -> list[Instance]:
        """The cached instances a restore of ``service`` onto ``start .. start + size`` evicts."""
        resident = {
            inst: CachedInstance(t, inst[2], inst[3], self.services[inst[0]].footprint_mb(inst[3]))
            for inst, t in self.cache_last_used.items()
            if inst[1] == node
        }
        used = {g: self.memory_used[(node, g)] for g in range(self.node_gpus[node])}
        need = self.services[service].footprint_mb(size)
        return lru_evictions(
            resident, used, self.gpu_memory_mb, start, size, need, exclusive=self.exclusive
        )

    def displaced_restores(self, service: str, size: int) -> float:
        """Seconds of restores that a cold start of ``service`` on ``size`` GPUs throws away now:
        the load times of the instances its restore would evict from the chunk it would get
        (Loom's own price on §5.3's LRU eviction: a later action of an evicted service pays that
        restore again). 0 when a chunk caching it is free or none of that size is."""
        try:
            node, _, _, sub = self._pick_chunk(size, service)
        except RuntimeError:
            return 0.0
        if (service, node, sub, size) in self.cache_last_used:
            return 0.0
        return sum(
            self.loader(self.services[victim[0]], victim[3])
            for victim in self._restore_victims(service, node, sub, size)
        )

    def _split_take(self, node: str, start: int, chunk_size: int, sub: int, size: int) -> None:
        self.free_chunks[_LEVEL[chunk_size]].discard((node, start))
        while chunk_size > size:
            chunk_size //= 2
            lower, upper = start, start + chunk_size
            if sub >= upper:
                self.free_chunks[_LEVEL[chunk_size]].add((node, lower))
                start = upper
            else:
                self.free_chunks[_LEVEL[chunk_size]].add((node, upper))

    def _free_coalesce(self, node: str, start: int, size: int) -> None:
        while size < self.node_gpus[node]:
            buddy = start ^ size
            level_set = self.free_chunks[_LEVEL[size]]
            if (node, buddy) not in level_set:
                break
            level_set.discard((node, buddy))
            start = min(start, buddy)
            size *= 2
        self.free_chunks[_LEVEL[size]].add((node, start))

    # --- service cache (EOE) ----------------------------------------------------------------

    def _ensure_cached(self, service: str, node: str, start: int, size: int, now: float) -> float:
        key = (service, node, start, size)
        if key in self.cache_last_used:
            self.cache_last_used[key] = now
            return 0.0
        spec = self.services[service]
        need = spec.footprint_mb(size)
        gpus = range(start, start + size)
        for inst in self._restore_victims(service, node, start, size):
            self._evict(inst)
        for g in gpus:
            self.memory_used[(node, g)] += need
        self.cache_last_used[key] = now
        self.loads += 1
        return self.loader(spec, size)

    def _evict(self, inst: Instance) -> None:
        service, node, start, size = inst
        del self.cache_last_used[inst]
        per_gpu = self.services[service].footprint_mb(size)
        for g in range(start, start + size):
            self.memory_used[(node, g)] -= per_gpu
        self.evictions += 1

    def cached_instances(self, service: str) -> list[Instance]:
        return [inst for inst in self.cache_last_used if inst[0] == service]

    # --- Topology interface -----------------------------------------------------------------

    def allocate(
        self, spec: ActionSpec, group: Hashable, units: Mapping[str, int], now: float
    ) -> Allocation:
        size = units[GPU]
        node, start, chunk_size, sub = self._pick_chunk(size, spec.service)
        self._split_take(node, start, chunk_size, sub, size)
        self.busy[spec.action_id] = (node, sub, size)
        for g in range(sub, sub + size):
            self.gpu_owner[(node, g)] = spec.action_id
        load = 0.0
        if spec.service is not None:
            load = self._ensure_cached(spec.service, node, sub, size, now)
            if load > 0:
                self.loading_until[spec.service] = max(
                    self.loading_until.get(spec.service, 0.0), now + load
                )
        return Allocation(
            action_id=spec.action_id,
            node=node,
            units=dict(units),
            gpu_ids=tuple(range(sub, sub + size)),
            dop=size,
            load_seconds=load,
        )

    def release(self, action_id: str, now: float) -> None:
        chunk = self.busy.pop(action_id, None)
        if chunk is None:
            return
        node, start, size = chunk
        for g in range(start, start + size):
            self.gpu_owner.pop((node, g), None)
        self._free_coalesce(node, start, size)

    def service_loading(self, service: str, now: float) -> bool:
        return self.loading_until.get(service, -1.0) > now

    def holdings(self) -> dict[str, dict[str, object]]:
        out: dict[str, dict[str, object]] = {}
        for node in self.node_names:
            free = sorted(
                (start, CHUNK_SIZES[lv])
                for lv, chunks in enumerate(self.free_chunks)
                for n, start in chunks
                if n == node
            )
            out[node] = {
                "gpus": self.node_gpus[node],
                "free_chunks": free,
                "busy": {a: c[1:] for a, c in self.busy.items() if c[0] == node},
                "cached": sorted(
                    f"{s}@{start}+{size}" for s, n, start, size in self.cache_last_used if n == node
                ),
                "memory_used_mb": [
                    self.memory_used[(node, g)] for g in range(self.node_gpus[node])
                ],
            }
        return out


class _GpuAccommodation(Accommodation):
    def __init__(self, topology: GpuTopology, now: float) -> None:
        self.topology = topology
        self.now = now
        self.start = topology.free_counts()
        self.counts: tuple[int, int, int, int] | None = self.start
        self.closed = False
        self._warm: dict[tuple[str, int], int] | None = None
        self._claims: dict[tuple[str, int], dict[str, int]] = {}
        self._displaced_cache: dict[tuple[str, int], float] = {}

    def warm_chunks(self, service: str, units: int) -> int:
        """Free chunks of ``units`` GPUs that cache ``service`` now (§5.3 EOE cache)."""
        if self._warm is None:
            owner = self.topology.gpu_owner
            warm: dict[tuple[str, int], int] = {}
            for name, node, start, size in self.topology.cache_last_used:
                if all((node, g) not in owner for g in range(start, start + size)):
                    warm[(name, size)] = warm.get((name, size), 0) + 1
            self._warm = warm
        return self._warm.get((service, units), 0)

    def restore_seconds(self, spec: ActionSpec, units: int) -> float:
        """The restore ``spec`` would pay on ``units`` GPUs (§5.3's EOE cost in GetDuration).

        Loom's own refinement of §5.3: a warm chunk serves one action, so the pass hands the
        free chunks caching ``spec.service`` at this DoP to its candidates in the order they
        ask (FCFS), and every candidate beyond that count pays the restore. Checking only
        whether *a* warm chunk exists let every candidate of a service look warm when one
        chunk was, and the scheduler then picked DoPs whose restores it never counted.
        A cold start is also charged the restores its LRU eviction throws away
        (``GpuTopology.displaced_restores``, Loom's own price): without it, mixing DoPs of the
        services made each cold start look as cheap as its own restore while it evicted
        instances that later actions had to restore again. Repeated calls for one action give
        the same answer.
        """
        if spec.service is None:
            return 0.0
        key = (spec.service, units)
        claims = self._claims.setdefault(key, {})
        rank = claims.setdefault(spec.action_id, len(claims))
        if rank < self.warm_chunks(spec.service, units):
            return 0.0
        restore = self.topology.loader(self.topology.services[spec.service], units)
        return restore + self._displaced(spec.service, units)

    def _displaced(self, service: str, units: int) -> float:
        """The restores a cold start of ``service`` on ``units`` GPUs evicts (once per pass:
        the cache does not change while a pass plans)."""
        key = (service, units)
        if key not in self._displaced_cache:
            self._displaced_cache[key] = self.topology.displaced_restores(service, units)
        return self._displaced_cache[key]

    def add(self, spec: ActionSpec, units: Mapping[str, int]) -> Placement | Blocked:
        after = None if self.counts is None or self.closed else chunk_take(self.counts, units[GPU])
        if after is None:
            self.closed = True
            loading = spec.service is not None and self.topology.service_loading(
                spec.service, self.now
            )
            return Blocked(WaitReason.SERVICE_LOADING if loading else WaitReason.NO_GPUS, None)
        self.counts = after
        return Placement(group="pool")

    def dp_operator(
        self, group: Hashable, resource: str, fixed: Sequence[tuple[ActionSpec, Mapping[str, int]]]
    ) -> GpuChunkDPOperator:
        if resource != GPU:
            raise ValueError(f"GPU topology scales only {GPU!r}, not {resource!r}")
        counts: tuple[int, int, int, int] | None = self.start
        for _, units in fixed:
            assert counts is not None
            counts = chunk_take(counts, units[GPU])
        if counts is None:
            counts = (0, 0, 0, 0)
        return GpuChunkDPOperator(counts, self.topology.total_gpus)

    def all_groups_closed(self) -> bool:
        return self.closed
