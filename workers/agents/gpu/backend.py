"""One interface for the services a GPU agent hosts (arl-tangram §5.3: EOE's breakdown).

A service keeps an invariant copy of its state in host memory (``prepare``); ``restore`` brings
it onto a chunk's devices, ``evict`` releases the devices' memory without writing anything back
(the host copy never changes), and ``execute`` serves one request on a chunk where the service
is resident. The cache (``cache.py``) decides when each happens; backends only do it.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from workers.agents.gpu.devices import Device


class ServiceError(Exception):
    """A request the service refuses (bad input): the message names the field and why."""


@dataclass(frozen=True)
class Chunk:
    """A buddy chunk of devices ``start .. start + size`` on this node (arl-tangram §5.3)."""

    start: int
    size: int
    devices: tuple[Device, ...]

    def __post_init__(self) -> None:
        if self.size not in (1, 2, 4, 8) or self.start % self.size:
            raise ValueError(f"gpus: ({self.start}, +{self.size}) is not an aligned buddy chunk")
        if len(self.devices) != self.size:
            raise ValueError(f"gpus: a chunk of {self.size} needs {self.size} devices")

    @property
    def key(self) -> tuple[int, int]:
        return (self.start, self.size)


def chunk_of(devices: Sequence[Device], gpu_ids: Sequence[int]) -> Chunk:
    """The chunk an allocation names by its GPU ids (consecutive, aligned, on this node)."""
    ids = sorted(gpu_ids)
    if not ids:
        raise ValueError("gpus: an allocation needs at least one GPU")
    start, size = ids[0], len(ids)
    if ids != list(range(start, start + size)):
        raise ValueError(f"gpus: {ids} are not consecutive")
    by_index = {device.index: device for device in devices}
    missing = [index for index in ids if index not in by_index]
    if missing:
        raise ValueError(f"gpus: {missing} are not on this node")
    return Chunk(start, size, tuple(by_index[index] for index in ids))


class ServiceBackend(abc.ABC):
    """A service the cache can prepare, restore, evict and run on a chunk."""

    kind: str = "abstract"

    def __init__(self, name: str) -> None:
        self.name = name

    @abc.abstractmethod
    async def prepare(self) -> None:
        """Load the invariant host-memory copy (once, at start-up: §5.3 "Upon initialization")."""

    @abc.abstractmethod
    def device_mb(self, chunk_size: int) -> float:
        """Memory the service takes on *each* device of a chunk of ``chunk_size``."""

    def chunk_sizes(self) -> tuple[int, ...]:
        """The chunk sizes this service can run on."""
        return (1, 2, 4, 8)

    @abc.abstractmethod
    async def restore(self, chunk: Chunk) -> None:
        """Bring the service onto ``chunk`` from the host copy."""

    @abc.abstractmethod
    async def evict(self, chunk: Chunk) -> None:
        """Release the service's memory on ``chunk`` (no write-back: the host copy is invariant)."""

    @abc.abstractmethod
    async def execute(
        self, chunk: Chunk, request: Mapping[str, Any], priority: int
    ) -> dict[str, Any]:
        """Serve one request on ``chunk`` (resident). Bad input raises ``ServiceError``."""

    async def close(self) -> None:  # noqa: B027 (optional hook)
        """Release everything (servers, host memory) on shutdown."""
