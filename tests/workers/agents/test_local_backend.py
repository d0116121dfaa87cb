"""Local backend: cgroup v1 cpuset/memory/quota per action, the affinity fallback, timeouts,
fork-and-leave, output caps, OOM, per-trajectory working directories (arl-tangram §5.2)."""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.workers.agents.conftest import (
    cpu_dispatch,
    leftover_processes,
    unique_node_id,
    wait_until,
)
from workers.agents.cpu.cgroups import CgroupV1Driver, CgroupV2Driver
from workers.agents.cpu.local import LocalBackend
from workers.agents.cpu.sandbox import WORKDIR
from workers.transport import Dispatch

CORES = tuple(sorted(os.sched_getaffinity(0)))


def _dispatch(action: str, command: str, **fields: Any) -> Dispatch:
    return cpu_dispatch(action, command, **fields)


def _v1_driver_or_skip(node: str) -> CgroupV1Driver:
    try:
        return CgroupV1Driver(node)
    except OSError as exc:
        pytest.skip(f"cgroup v1 not writable here: {exc}")


@pytest.fixture
def node_id(request: pytest.FixtureRequest) -> str:
    return unique_node_id(request, "test")


@pytest.fixture
async def cgroup_backend(tmp_path: Path, node_id: str) -> AsyncIterator[LocalBackend]:
    driver = _v1_driver_or_skip(node_id)
    backend = LocalBackend(node_id=node_id, work_root=tmp_path, cgroups=driver)
    yield backend
    await backend.close()
    assert not any(base.exists() for base in driver.bases.values())


@pytest.fixture
async def affinity_backend(tmp_path: Path, node_id: str) -> AsyncIterator[LocalBackend]:
    backend = LocalBackend(node_id=node_id, work_root=tmp_path, cgroups=None)
    yield backend
    await backend.close()


async def test_cgroup_pins_cores_limits_memory_quota_and_pids(
    cgroup_backend: LocalBackend,
) -> None:
    """The sandbox has no /sys: the limits are read from the host while the action runs."""
    core = CORES[-1]
    command = "grep Cpus_allowed_list /proc/self/status; echo dop={dop} $LOOM_DOP; sleep 3"
    driver = cgroup_backend.cgroups
    assert isinstance(driver, CgroupV1Driver)
    run = asyncio.create_task(
        cgroup_backend.run(_dispatch("a", command, cores=(core,), memory_mb=96))
    )
    await wait_until(lambda: any(p.is_dir() for p in driver.bases["cpuset"].iterdir()))
    [name] = [p.name for p in driver.bases["cpuset"].iterdir() if p.is_dir()]
    knobs = {
        ("cpuset", "cpuset.cpus"): str(core),
        ("memory", "memory.limit_in_bytes"): str(96 * 2**20),
        ("cpu", "cpu.cfs_quota_us"): "100000",
        ("pids", "pids.max"): str(cgroup_backend.pids_limit),
    }
    for (controller, knob), expected in knobs.items():
        if controller in driver.bases:
            assert (driver.bases[controller] / name / knob).read_text().strip() == expected
    outcome = await run
    assert outcome.exit_code == 0, outcome.output
    lines = outcome.output.decode().split("\n")
    assert lines[0] == f"Cpus_allowed_list:\t{core}"
    assert lines[1] == "dop=1 1"
    assert cgroup_backend.isolation == "cgroup-v1"
    assert [p for p in driver.bases["cpuset"].iterdir() if p.is_dir()] == []  # removed


async def test_dop_follows_the_allocated_cores(cgroup_backend: LocalBackend) -> None:
    outcome = await cgroup_backend.run(_dispatch("a", "echo {dop}", cores=CORES))
    assert outcome.output.decode().strip() == str(len(CORES))


async def test_timeout_kills_the_whole_tree(cgroup_backend: LocalBackend) -> None:
    marker = f"{cgroup_backend.node_id}/"
    command = "sleep 60 & setsid sleep 61 & (sleep 62 &) ; sleep 63"
    started = time.monotonic()
    outcome = await cgroup_backend.run(_dispatch("slow", command, timeout_s=0.5))
    assert outcome.timed_out
    assert time.monotonic() - started < 5
    assert leftover_processes(marker) == []


async def test_fork_and_leave_leaves_nothing(cgroup_backend: LocalBackend) -> None:
    command = "setsid sleep 60 & sleep 61 & echo started"
    outcome = await cgroup_backend.run(_dispatch("forky", command))
    assert outcome.exit_code == 0
    assert outcome.output == b"started\n"
    assert leftover_processes(f"{cgroup_backend.node_id}/") == []


async def test_nonzero_exit_and_output_cap(cgroup_backend: LocalBackend) -> None:
    command = "head -c 200000 /dev/zero | tr '\\0' x; exit 7"
    outcome = await cgroup_backend.run(_dispatch("big", command, output_cap_bytes=1000))
    assert outcome.exit_code == 7
    assert outcome.output == b"x" * 1000
    assert outcome.output_truncated


async def test_oom_is_detected(cgroup_backend: LocalBackend) -> None:
    command = "python3 -c 'x = bytearray(400 * 2**20); print(len(x))'"  # /usr/bin: in the sandbox
    outcome = await cgroup_backend.run(_dispatch("hog", command, memory_mb=64))
    assert outcome.exit_code != 0
    assert outcome.oom_killed


async def test_trajectory_directory_persists_then_goes(cgroup_backend: LocalBackend) -> None:
    first = await cgroup_backend.run(_dispatch("w", "echo state > f; pwd", trajectory_id="tr1"))
    assert first.output == f"{WORKDIR}\n".encode()  # the sandbox's view of its directory
    workdir = cgroup_backend.trajectory_dir("tr1")
    assert (workdir / "f").read_text() == "state\n"
    second = await cgroup_backend.run(_dispatch("r", "cat f", trajectory_id="tr1"))
    assert second.output == b"state\n"
    other = await cgroup_backend.run(_dispatch("o", "cat f", trajectory_id="tr2"))
    assert other.exit_code != 0  # trajectories do not share directories
    await cgroup_backend.end_trajectory("tr1")
    assert not workdir.exists()


async def test_idle_trajectories_are_swept(affinity_backend: LocalBackend) -> None:
    await affinity_backend.run(_dispatch("w", "touch f", trajectory_id="idle"))
    assert await affinity_backend.sweep_idle(time.time()) == []
    swept = await affinity_backend.sweep_idle(time.time() + affinity_backend.idle_ttl_s + 1)
    assert swept == ["idle"]
    assert not affinity_backend.trajectory_dir("idle").exists()


async def test_affinity_fallback_pins_and_kills_escaped_children(
    affinity_backend: LocalBackend,
) -> None:
    core = CORES[0]
    pinned = await affinity_backend.run(
        _dispatch("pin", "grep Cpus_allowed_list /proc/self/status", cores=(core,))
    )
    assert re.fullmatch(rf"Cpus_allowed_list:\s+{core}\n", pinned.output.decode())
    assert affinity_backend.isolation == "affinity"
    outcome = await affinity_backend.run(
        _dispatch("esc", "setsid sleep 60 & sleep 61 & sleep 62", timeout_s=0.4)
    )
    assert outcome.timed_out
    assert leftover_processes(f"{affinity_backend.node_id}/") == []


async def test_cgroup_v2_delegated_subtree(tmp_path: Path) -> None:
    root = Path(os.environ.get("LOOM_TEST_CGROUP_V2_ROOT", "/sys/fs/cgroup"))
    try:
        driver = CgroupV2Driver("v2test", root)
    except OSError as exc:
        pytest.skip(f"no delegated cgroup v2 subtree with cpuset/cpu/memory at {root}: {exc}")
    backend = LocalBackend(node_id="v2test", work_root=tmp_path, cgroups=driver)
    outcome = await backend.run(
        _dispatch("v2", "grep Cpus_allowed_list /proc/self/status", cores=CORES[:1])
    )
    assert outcome.output.decode().split()[-1] == str(CORES[0])
    await backend.close()


async def test_a_saturated_default_executor_does_not_stall_the_backend(
    cgroup_backend: LocalBackend,
) -> None:
    """Every thread of the loop's default executor blocked (an embedded demo's waiters, say):
    the backend still creates its cgroup, runs the action and cleans up, on its own threads."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    loop = asyncio.get_running_loop()
    release = threading.Event()
    saturated = ThreadPoolExecutor(1)
    loop.set_default_executor(saturated)
    blocker = loop.run_in_executor(None, release.wait, 30)
    try:
        outcome = await asyncio.wait_for(cgroup_backend.run(_dispatch("starved", "echo ran")), 20)
        assert outcome.exit_code == 0 and outcome.output.strip() == b"ran"
        assert not blocker.done()  # the default executor was busy all along
    finally:
        release.set()
        await blocker
