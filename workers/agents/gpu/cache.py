"""The service cache with evict-on-execution (arl-tangram §5.3, "Breakdown in GPU Manager").

Every service keeps an invariant copy in host memory, loaded once (``prepare``). A request runs
on the chunk the scheduler allocated: if the service is resident there it runs at once (warm);
otherwise the cache evicts least-recently-used instances overlapping the chunk until the
service's per-device footprint fits (the rule the simulator's ``GpuTopology`` uses,
``lru_evictions``), restores the service from host memory, and runs it. The instance then stays
resident until a later request needs its memory. Different chunk sizes of one service are
distinct instances (§5.3: "treating different DoP configurations ... as distinct services").

At most one request runs on a device at a time (§5.3): the scheduler allocates disjoint chunks,
and the cache also holds a lock per device, so a request that arrives while its chunk is still
busy waits — its queue time. Bookkeeping (what is resident, the memory each device has used) is
decided under one lock; restores, which take long, run outside it.

CPU stand-in devices are not independent the way GPUs are: they all compute on the host's
cores. ``compute_slots`` (None on GPUs) bounds how many requests execute at once on the node,
in arrival order, so that a stand-in computes one request at full speed rather than
time-slicing the cores with every other busy stand-in; a request waiting for a slot holds its
chunk, and the wait counts as queue time. On a host whose cores other work also uses, fewer
runnable threads also means a smaller share of those cores, so the agent leaves it off unless
asked (``--host-compute-slots``).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from workers.agents.gpu.backend import Chunk, ServiceBackend, chunk_of
from workers.agents.gpu.devices import Device
from workers.algorithms.tangram.topology.gpu import CachedInstance, lru_evictions

EventKind = Literal["load", "restore", "evict"]
Instance = tuple[str, int, int]  # (service, start, size)


class CacheError(Exception):
    """A request the cache cannot serve (unknown service, chunk too small): names the field."""


class LoadFailed(CacheError):
    """The service's weights did not load into host memory, or did not restore onto the chunk."""


@dataclass(frozen=True)
class CacheEvent:
    """One cache transition, for the agent's reports and the dashboard's GPU map."""

    kind: EventKind
    service: str
    start: int
    size: int
    at: float
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Timings:
    """Where a request's time went on the agent (seconds)."""

    queue_s: float
    restore_s: float
    execute_s: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True)
class Served:
    """One request's output, its timings and the cache events it caused."""

    output: dict[str, Any]
    timings: Timings
    events: tuple[CacheEvent, ...]
    warm: bool


class ServiceCache:
    """Services' host copies plus which instance is resident on which chunk of this node."""

    def __init__(
        self,
        devices: Sequence[Device],
        services: Mapping[str, ServiceBackend],
        *,
        clock: Callable[[], float] = time.time,
        remember_events: int = 1_000,
        compute_slots: int | None = None,
    ) -> None:
        if not devices:
            raise ValueError("devices: a GPU node needs at least one device")
        self.devices = list(devices)
        self.services = dict(services)
        self.clock = clock
        self.memory_used: dict[int, float] = {device.index: 0.0 for device in self.devices}
        self._capacity = {device.index: float(device.memory_mb) for device in self.devices}
        self._resident: dict[Instance, CachedInstance] = {}
        self._device_locks = {device.index: asyncio.Lock() for device in self.devices}
        self._book = asyncio.Lock()
        if compute_slots is not None and compute_slots < 1:
            raise ValueError("compute_slots: at least one request must be able to execute")
        self.compute_slots = compute_slots
        self._compute = asyncio.Semaphore(compute_slots) if compute_slots else None
        self.events: deque[CacheEvent] = deque(maxlen=remember_events)
        self.restores = 0
        self.restore_seconds = 0.0
        self.evictions = 0
        self.prepared = False
        self.failed: dict[str, str] = {}  # service -> why its weights did not load

    # --- start-up ---------------------------------------------------------------------------

    async def prepare(self) -> list[CacheEvent]:
        """Load every service's host copy (§5.3 "Upon initialization"); one ``load`` each.

        A service whose weights fail to load does not stop the others: it is kept in ``failed``
        with the reason, and each request for it fails with that reason (``LoadFailed``).
        """
        events = []
        for name, backend in self.services.items():
            began = self.clock()
            try:
                await backend.prepare()
            except Exception as exc:
                self.failed[name] = f"{type(exc).__name__}: {exc}"
                continue
            events.append(self._note("load", name, 0, 0, began))
        self.prepared = True
        return events

    # --- serving ----------------------------------------------------------------------------

    async def serve(
        self,
        service: str,
        gpu_ids: Sequence[int],
        request: Mapping[str, Any],
        priority: int = 0,
    ) -> Served:
        """Run ``request`` on the chunk ``gpu_ids``, restoring ``service`` there first if needed."""
        backend = self.services.get(service)
        if backend is None:
            raise CacheError(f"service: {service!r} is not hosted here ({sorted(self.services)})")
        if service in self.failed:
            raise LoadFailed(f"service: {service!r} did not load: {self.failed[service]}")
        try:
            chunk = chunk_of(self.devices, gpu_ids)
        except ValueError as exc:
            raise CacheError(str(exc)) from exc
        if chunk.size not in backend.chunk_sizes():
            raise CacheError(
                f"gpus: {service!r} runs on chunks of {backend.chunk_sizes()}, not {chunk.size}"
            )
        arrived = self.clock()
        locks = [self._device_locks[device.index] for device in chunk.devices]
        for lock in locks:  # in index order: two chunks never wait on each other
            await lock.acquire()
        try:
            began = self.clock()
            events, warm = await self._make_resident(backend, chunk)
            restored = self.clock()
            if self._compute is not None:
                await self._compute.acquire()
            try:
                ready = self.clock()
                output = await backend.execute(chunk, request, priority)
                done = self.clock()
            finally:
                if self._compute is not None:
                    self._compute.release()
        finally:
            for lock in reversed(locks):
                lock.release()
        timings = Timings(
            queue_s=(began - arrived) + (ready - restored),
            restore_s=restored - began,
            execute_s=done - ready,
        )
        return Served(output=output, timings=timings, events=tuple(events), warm=warm)

    async def _make_resident(
        self, backend: ServiceBackend, chunk: Chunk
    ) -> tuple[list[CacheEvent], bool]:
        key = (backend.name, chunk.start, chunk.size)
        events: list[CacheEvent] = []
        async with self._book:
            now = self.clock()
            if key in self._resident:
                self._resident[key] = CachedInstance(
                    now, chunk.start, chunk.size, self._resident[key].per_gpu_mb
                )
                return events, True
            need = backend.device_mb(chunk.size)
            capacity = min(self._capacity[device.index] for device in chunk.devices)
            if need > capacity:
                raise CacheError(
                    f"gpus: {backend.name!r} needs {need:.0f} MB on each of {chunk.size} devices,"
                    f" a device here has {capacity:.0f} MB"
                )
            victims = lru_evictions(
                self._resident, self.memory_used, capacity, chunk.start, chunk.size, need
            )
            for victim in victims:
                events.append(await self._evict(victim))
            for device in chunk.devices:
                self.memory_used[device.index] += need
            reserved = CachedInstance(now, chunk.start, chunk.size, need)
        began = self.clock()
        try:
            await backend.restore(chunk)
        except BaseException as exc:
            async with self._book:
                for device in chunk.devices:
                    self.memory_used[device.index] -= need
            if isinstance(exc, Exception):
                raise LoadFailed(
                    f"service: {backend.name!r} did not restore onto chunk {chunk.key}:"
                    f" {type(exc).__name__}: {exc}"
                ) from exc
            raise
        async with self._book:
            self._resident[key] = reserved
        event = self._note("restore", backend.name, chunk.start, chunk.size, began)
        self.restores += 1
        self.restore_seconds += event.seconds
        events.append(event)
        return events, False

    async def _evict(self, instance: Instance) -> CacheEvent:
        service, start, size = instance
        began = self.clock()
        cached = self._resident.pop(instance)
        chunk = chunk_of(self.devices, range(start, start + size))
        try:
            await self.services[service].evict(chunk)
        finally:
            for device in chunk.devices:
                self.memory_used[device.index] -= cached.per_gpu_mb
        self.evictions += 1
        return self._note("evict", service, start, size, began)

    def _note(
        self, kind: EventKind, service: str, start: int, size: int, began: float
    ) -> CacheEvent:
        event = CacheEvent(kind, service, start, size, began, self.clock() - began)
        self.events.append(event)
        return event

    # --- what the agent reports -------------------------------------------------------------

    def resident(self) -> list[dict[str, Any]]:
        """Which service is warm on which chunk, with when it was last used (LRU order)."""
        return [
            {"service": s, "start": start, "size": size, "last_used": cached.last_used}
            for (s, start, size), cached in sorted(
                self._resident.items(), key=lambda item: item[1].last_used
            )
        ]

    def warm_chunks(self, service: str) -> list[tuple[int, int]]:
        """The chunks ``(start, size)`` where ``service`` is resident now."""
        return sorted((start, size) for s, start, size in self._resident if s == service)

    async def evict_all(self) -> list[CacheEvent]:
        """Evict every resident instance (the host copies stay)."""
        async with self._book:
            return [await self._evict(instance) for instance in list(self._resident)]

    async def close(self) -> None:
        """Evict everything and close the backends."""
        await self.evict_all()
        for backend in self.services.values():
            await backend.close()
