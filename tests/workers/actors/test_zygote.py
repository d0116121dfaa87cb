"""The zygote's memory layout: the environment it starts with and the huge-page collapse that
makes each fork and exit cheaper."""

from __future__ import annotations

import mmap
import re
from pathlib import Path

import numpy as np
import pytest

from workers.actors.zygote import HUGE_PAGE, collapse_to_huge_pages, zygote_environment


def test_the_zygote_environment_adds_the_malloc_huge_page_tunable_once():
    assert zygote_environment({"PATH": "/bin"}) == {
        "PATH": "/bin",
        "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1",
    }
    kept = zygote_environment({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})
    assert kept["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"
    chosen = zygote_environment({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"})
    assert chosen["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=0"  # the caller's choice stands


def _huge_kb_within(start: int, end: int) -> int:
    """AnonHugePages of the mappings overlapping ``[start, end)`` (one allocation may span
    several mappings once part of it is advised)."""
    inside, huge = False, 0
    for line in Path("/proc/self/smaps").read_text().splitlines():
        bounds = re.match(r"^([0-9a-f]+)-([0-9a-f]+) ", line)
        if bounds:
            inside = int(bounds[1], 16) < end and start < int(bounds[2], 16)
        elif inside and line.startswith("AnonHugePages:"):
            huge += int(line.split()[1])
    return huge


def test_anonymous_memory_is_collapsed_into_huge_pages():
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not thp.exists() or "[never]" in thp.read_text():
        pytest.skip("transparent huge pages are off on this machine")
    region = mmap.mmap(-1, 8 * HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    block = np.frombuffer(region, np.float64)
    block[:] = 1.0  # every 4 KiB page touched (the kernel gave no huge page: not advised)
    address = block.__array_interface__["data"][0]
    before = _huge_kb_within(address, address + block.nbytes)
    collapsed = collapse_to_huge_pages()
    if collapsed == 0:
        pytest.skip("this kernel does not collapse (MADV_COLLAPSE needs Linux 6.1)")
    assert collapsed % HUGE_PAGE == 0
    after = _huge_kb_within(address, address + block.nbytes)
    assert before == 0 and after * 1024 >= 6 * HUGE_PAGE  # all but the unaligned ends
    assert float(block.sum()) == block.size  # the data is untouched


def test_a_maps_file_without_anonymous_regions_collapses_nothing(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("00400000-00800000 r-xp 00000000 fd:00 1 /usr/bin/python3\n")
    assert collapse_to_huge_pages(str(maps)) == 0
