"""The accelerators a GPU node offers (arl-tangram §5.3 "Pool"): count, memory, NVLink groups.

On a machine with CUDA these are the real GPUs. Without one, ``count`` CPU stand-ins with a
declared memory each take their place, so that the same cache, backends and agent run (and are
tested) everywhere: a stand-in's "device memory" is host memory the cache accounts for, and its
restore is a real copy of the weights out of the invariant host copy.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Device:
    """One accelerator: its index on the node, the torch device it maps to, its memory."""

    index: int
    torch_device: str
    memory_mb: int

    @property
    def is_cuda(self) -> bool:
        return self.torch_device.startswith("cuda")


def cuda_present() -> bool:
    return torch.cuda.is_available()


def discover_devices(count: int | None = None, memory_mb: int | None = None) -> list[Device]:
    """The node's devices: every visible CUDA GPU, or ``count`` CPU stand-ins.

    ``count`` limits the GPUs used (or sets the stand-ins' number: required without CUDA);
    ``memory_mb`` caps each device's memory for the cache (required for stand-ins).
    """
    if cuda_present():
        visible = torch.cuda.device_count()
        wanted = visible if count is None else count
        if not 1 <= wanted <= visible:
            raise ValueError(f"count: {wanted} GPUs asked, {visible} visible")
        devices = []
        for index in range(wanted):
            total = torch.cuda.get_device_properties(index).total_memory // (1024 * 1024)
            devices.append(Device(index, f"cuda:{index}", min(total, memory_mb or total)))
        return devices
    if count is None or count < 1:
        raise ValueError("count: without CUDA, the number of CPU stand-in devices is required")
    if memory_mb is None or memory_mb < 1:
        raise ValueError("memory_mb: without CUDA, each stand-in device needs a declared memory")
    return [Device(index, "cpu", memory_mb) for index in range(count)]


def compute_slots(devices: Sequence[Device]) -> int | None:
    """How many requests can truly compute at once: None for GPUs (each computes on its own),
    the host's usable cores for CPU stand-ins (they all compute on those cores)."""
    if not devices or devices[0].is_cuda:
        return None
    return min(len(devices), len(os.sched_getaffinity(0)))


def nvlink_groups(devices: Sequence[Device]) -> list[tuple[int, ...]]:
    """Devices that reach each other directly (peer access), as groups of indices.

    CUDA: connected components of ``torch.cuda.can_device_access_peer``; stand-ins share the host
    memory, so they form one group.
    """
    indices = [device.index for device in devices]
    if not devices or not devices[0].is_cuda:
        return [tuple(indices)] if indices else []
    groups: list[set[int]] = []
    for index in indices:
        linked = [
            group
            for group in groups
            if any(torch.cuda.can_device_access_peer(index, other) for other in group)
        ]
        merged = {index}.union(*linked)
        groups = [group for group in groups if group not in linked] + [merged]
    return sorted(tuple(sorted(group)) for group in groups)
