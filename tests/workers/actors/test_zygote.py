"""The zygote's memory layout (the environment it starts with, the huge-page collapse that makes
each fork and exit cheaper) and its keep-warm actors (parked after their checkpoint, reused
without a fork, retired after their keep-warm time)."""

from __future__ import annotations

import mmap
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest

from workers.actors.pool import ActorPool, ActorPoolError, ActorState
from workers.actors.zygote import (
    HUGE_PAGE,
    collapse_to_huge_pages,
    lower_priority,
    zygote_environment,
)


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


def _pool(tmp_path: Path, address: str, keep_warm_s: float, actors=("a0", "a1")) -> ActorPool:
    return ActorPool(
        "tests.workers.actors.programs:program",
        list(actors),
        tmp_path / "ckpt",
        steps=4,
        sink={"address": address, "buffer": "rollout"},
        keep_warm_s=keep_warm_s,
    )


def _forks(pool: ActorPool) -> list[int]:
    """The pids of the pool's forked (or reused) actor processes, in order."""
    pids: list[int] = []

    def record(event: dict[str, object]) -> None:
        if event.get("event") == "forked":
            pids.append(int(str(event["pid"])))

    pool.listeners.append(record)
    return pids


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"


@pytest.mark.processes
def test_a_kept_warm_actor_serves_the_next_invocations_without_a_fork(served, tmp_path):
    buffer, address = served
    with _pool(tmp_path, address, keep_warm_s=30.0) as pool:
        pids = _forks(pool)
        runs = [pool.run_iteration(["a0", "a1"]) for _ in range(3)]
        assert pool.states() == {"a0": "checkpointed", "a1": "checkpointed"}
        assert len(set(pids)) == 2 and len(pids) == 6  # one process per actor, reused
        assert all(run[a].code == 0 and run[a].sampled for run in runs for a in ("a0", "a1"))
        assert not runs[0]["a0"].restored and runs[2]["a0"].restored
        assert all(_alive(pid) for pid in set(pids))  # parked, not ended
        pool.kill("a0")  # a parked actor killed: its next invocation forks and restores
        time.sleep(0.2)
        again = pool.run_iteration(["a0"])["a0"]
        assert again.code == 0 and again.restored and len(set(pids)) == 3
    assert buffer.gather({"a0": (0, 16)})["actor_step"].tolist() == list(range(16))
    assert not any(_alive(pid) for pid in set(pids))  # the zygote's exit ends parked ones


@pytest.mark.processes
def test_a_parked_actor_is_retired_after_its_keep_warm_time(served, tmp_path):
    _, address = served
    with _pool(tmp_path, address, keep_warm_s=0.2, actors=("a0",)) as pool:
        pids = _forks(pool)
        pool.run_iteration(["a0"])
        time.sleep(1.0)
        assert not _alive(pids[0])
        second = pool.run_iteration(["a0"])["a0"]  # forked again, restored from its checkpoint
        assert second.restored and len(set(pids)) == 2 and second.code == 0
        prewarmed = pool.prewarm("a0")  # a pre-warm forks; its go comes over the pipe
        assert prewarmed
        third = pool.invoke("a0")
        assert pool.wait(["a0"])["a0"].sampled and third.prewarmed


@pytest.mark.processes
def test_a_kept_warm_actor_can_be_prewarmed_and_waits_for_its_go(served, tmp_path):
    _, address = served
    with _pool(tmp_path, address, keep_warm_s=30.0, actors=("a0",)) as pool:
        pool.run_iteration(["a0"])
        assert pool.prewarm("a0")
        deadline = time.monotonic() + 10
        while pool.states()["a0"] != ActorState.WARM and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pool.states()["a0"] == ActorState.WARM
        invocation = pool.invoke("a0")
        result = pool.wait(["a0"])["a0"]
        assert result is invocation and result.sampled and result.startup_wait_s == 0.0


def _wakeups(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M)[1])  # type: ignore[index]


@pytest.mark.processes
def test_an_idle_zygote_sleeps_until_something_happens(served, tmp_path):
    """No polling: with an actor parked for long, the zygote wakes for requests, exits and
    retirements only (a 5 ms poll would wake it about a hundred times in half a second)."""
    _, address = served
    with _pool(tmp_path, address, keep_warm_s=30.0, actors=("a0",)) as pool:
        pool.run_iteration(["a0"])
        assert pool._process is not None
        zygote = pool._process.pid
        before = _wakeups(zygote)
        time.sleep(0.5)
        assert _wakeups(zygote) - before <= 3
        assert pool.run_iteration(["a0"])["a0"].sampled  # and it still serves


def test_keep_warm_time_must_not_be_negative(tmp_path):
    with pytest.raises(ActorPoolError, match="keep_warm_s"):
        _pool(tmp_path, "tcp://127.0.0.1:1", keep_warm_s=-1.0)


@pytest.mark.processes  # forks a child
def test_an_actor_never_raises_its_priority_above_its_zygotes():
    """``lower_priority`` only lowers: at niceness 18 a request for 15 leaves it at 18 (in a
    forked child: a process cannot take its own priority back)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, 18)
            lower_priority(15)
            kept = os.getpriority(os.PRIO_PROCESS, 0)
            lower_priority(19)
            os.write(write_end, f"{kept} {os.getpriority(os.PRIO_PROCESS, 0)}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as results:
        assert results.read().split() == ["18", "19"]
    os.waitpid(pid, 0)
