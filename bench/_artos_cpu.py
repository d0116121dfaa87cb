"""CPU-seconds of a whole process tree, from the processes' own accounting (/proc/<pid>/stat).

The ARTOS benches run each system in a fresh process that is a child subreaper, so every
process either system starts (Loom's zygote and its forked actors; Ray's GCS, raylet, workers
and agents) stays in the tree, and an orphan is reaped inside it. The tree's CPU time at any
moment is, over its live processes, their own user+system time plus that of the children they
already reaped (``cutime``/``cstime``): a process that exited is counted once, by its reaper.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")
_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Orphaned descendants are re-parented to this process (Linux), so they stay counted."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _stat(pid: int) -> tuple[int, float] | None:
    """``(ppid, cpu seconds of the process and its reaped children)``."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    ppid = int(fields[1])
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return ppid, (utime + stime + cutime + cstime) / _TICKS


def process_cpu_seconds(pid: int) -> float | None:
    """CPU-seconds of one process and the children it reaped; None once it is gone."""
    stat = _stat(pid)
    return None if stat is None else stat[1]


def tree_cpu_seconds(root: int | None = None) -> tuple[float, int]:
    """CPU-seconds of ``root`` (this process by default) and all its descendants, and how many
    processes the tree holds now."""
    root = os.getpid() if root is None else root
    table: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None:
                table[int(entry)] = stat
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    total, count, stack = 0.0, 0, [root]
    while stack:
        pid = stack.pop()
        if pid not in table:
            continue
        total += table[pid][1]
        count += 1
        stack.extend(children.get(pid, []))
    return total, count


def tree_pids(root: int | None = None) -> list[int]:
    """The live descendants of ``root`` (for the no-leftovers check)."""
    root = os.getpid() if root is None else root
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None:
                parents[int(entry)] = stat[0]
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        kids = [p for p, parent in parents.items() if parent == pid]
        found += kids
        frontier += kids
    return found


def tree_breakdown(root: int | None = None) -> list[dict[str, float | str | int]]:
    """Per live process of the tree: its name, own CPU-seconds and its reaped children's (where
    the CPU of a system went: Loom's zygote and forked actors, Ray's GCS, raylet, workers)."""
    root = os.getpid() if root is None else root
    rows: list[dict[str, float | str | int]] = []
    for pid in [root, *tree_pids(root)]:
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
        rows.append(
            {
                "pid": pid,
                "name": text[text.index("(") + 1 : text.rindex(")")],
                "cmdline": cmdline[:120],
                "own_cpu_s": (utime + stime) / _TICKS,
                "reaped_children_cpu_s": (cutime + cstime) / _TICKS,
            }
        )
    return rows
