"""Memory of CPU stand-in devices: blocks kept for reuse, as a GPU's memory stays mapped.

A GPU's memory exists before a restore and after an eviction, and PyTorch's CUDA caching
allocator hands a freed block to the next restore of the same size, so a restore (arl-tangram
§5.3) is a copy into memory that is already there. A stand-in's "device memory" is host memory;
allocated afresh for every restore, the copy would first fault in every page of the new
allocation, a cost no GPU restore pays. ``BlockPool`` keeps an evicted replica's block per
stand-in device for the next restore of that size, up to the device's declared memory.
"""

from __future__ import annotations

import torch

from workers.agents.gpu.devices import Device

_MIB = 1024 * 1024


class BlockPool:
    """Freed byte blocks per stand-in device index, reused by exact size."""

    def __init__(self) -> None:
        self._free: dict[int, list[torch.Tensor]] = {}

    def take(self, device: Device, nbytes: int) -> torch.Tensor:
        """A block of ``nbytes`` on ``device``: a freed one of that size, or a new one."""
        free = self._free.setdefault(device.index, [])
        for position, block in enumerate(free):
            if block.numel() == nbytes:
                return free.pop(position)
        return torch.empty(nbytes, dtype=torch.uint8)

    def give(self, device: Device, block: torch.Tensor) -> None:
        """Keep ``block`` for the next restore on ``device``, dropping the oldest blocks that
        would take the kept total over the device's memory."""
        free = self._free.setdefault(device.index, [])
        free.append(block)
        while sum(b.numel() for b in free) > device.memory_mb * _MIB:
            free.pop(0)

    def cached_bytes(self, device: Device) -> int:
        return sum(block.numel() for block in self._free.get(device.index, []))


STANDIN_BLOCKS = BlockPool()
