"""What a node has: usable cores, their NUMA layout, memory (arl-tangram §5.2 "Pool")."""

from __future__ import annotations

import os
from pathlib import Path

NODE_SYSFS = Path("/sys/devices/system/node")


def parse_cpu_list(text: str) -> list[int]:
    """Parse the kernel's list format (``0-3,8,10-11``) into sorted core ids."""
    cores: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            low, high = part.split("-", 1)
            cores.update(range(int(low), int(high) + 1))
        else:
            cores.add(int(part))
    return sorted(cores)


def format_cpu_list(cores: list[int] | tuple[int, ...]) -> str:
    """The inverse of ``parse_cpu_list`` (``[0, 1, 2, 5]`` → ``0-2,5``)."""
    ordered = sorted(set(cores))
    ranges: list[str] = []
    index = 0
    while index < len(ordered):
        start = end = ordered[index]
        while index + 1 < len(ordered) and ordered[index + 1] == end + 1:
            index += 1
            end = ordered[index]
        ranges.append(str(start) if start == end else f"{start}-{end}")
        index += 1
    return ",".join(ranges)


def usable_cores() -> list[int]:
    """Cores this process may run on (respects an outer cpuset / affinity)."""
    return sorted(os.sched_getaffinity(0))


def numa_layout(
    cores: list[int] | tuple[int, ...], sysfs: Path = NODE_SYSFS
) -> dict[int, tuple[int, ...]]:
    """NUMA node → the given cores on it; everything on node 0 where sysfs has no NUMA info."""
    wanted = set(cores)
    layout: dict[int, tuple[int, ...]] = {}
    nodes = sorted(sysfs.glob("node[0-9]*")) if sysfs.is_dir() else []
    for node_dir in nodes:
        try:
            node_cores = parse_cpu_list((node_dir / "cpulist").read_text())
        except (OSError, ValueError):
            continue
        mine = tuple(c for c in node_cores if c in wanted)
        if mine:
            layout[int(node_dir.name[4:])] = mine
    placed = {c for node_cores in layout.values() for c in node_cores}
    if placed != wanted:
        layout.setdefault(0, ())
        layout[0] = tuple(sorted(set(layout[0]) | (wanted - placed)))
    return layout


def total_memory_mb(meminfo: Path = Path("/proc/meminfo")) -> int:
    """MemTotal in MiB."""
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError("MemTotal missing from /proc/meminfo")
