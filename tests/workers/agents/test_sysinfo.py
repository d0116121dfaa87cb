"""Host discovery: CPU list format, NUMA layout from sysfs, memory."""

from __future__ import annotations

from pathlib import Path

from workers.agents.common.sysinfo import (
    format_cpu_list,
    numa_layout,
    parse_cpu_list,
    total_memory_mb,
    usable_cores,
)


def test_cpu_list_round_trip() -> None:
    assert parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert format_cpu_list([11, 0, 1, 2, 3, 8, 10]) == "0-3,8,10-11"
    assert format_cpu_list((5,)) == "5"


def test_numa_layout_groups_cores_by_node(tmp_path: Path) -> None:
    for node, cpus in (("node0", "0-3"), ("node1", "4-7")):
        (tmp_path / node).mkdir()
        (tmp_path / node / "cpulist").write_text(cpus + "\n")
    assert numa_layout([1, 2, 5, 6], tmp_path) == {0: (1, 2), 1: (5, 6)}
    assert numa_layout([1, 9], tmp_path) == {0: (1, 9)}  # unknown cores land on node 0


def test_this_host() -> None:
    cores = usable_cores()
    layout = numa_layout(cores)
    assert sorted(c for node in layout.values() for c in node) == cores
    assert total_memory_mb() > 0
