"""psutil-free /proc scans: find and kill every process of one action, wherever it went.

Each action's processes carry an environment marker ``LOOM_ACTION=<token>`` inherited by all
descendants, including ones that escaped the process group (``setsid``) or were re-parented to
init. That is how the affinity fallback and the docker backend (whose exec'd processes are
visible in the host's /proc) leave nothing behind after a timeout or a fork-and-leave command.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

MARKER_VARIABLE = "LOOM_ACTION"
PROC = Path("/proc")


def _process_state(pid: int) -> str:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return "X"
    return stat.rsplit(")", 1)[1].split()[0]


def is_alive(pid: int) -> bool:
    """True for a live process; zombies (exited, not yet reaped) count as dead."""
    return _process_state(pid) not in ("Z", "X")


def marked_pids(token: str, *, cgroup_hint: str | None = None) -> list[int]:
    """Live processes whose environment holds ``LOOM_ACTION=<token>``.

    ``cgroup_hint``: only processes whose /proc/PID/cgroup mentions it (a container id).
    """
    needle = f"{MARKER_VARIABLE}={token}".encode() + b"\0"
    found = []
    own = os.getpid()
    for entry in os.scandir(PROC):
        if not entry.name.isdigit() or int(entry.name) == own:
            continue
        try:
            if cgroup_hint is not None:
                cgroups = (PROC / entry.name / "cgroup").read_text()
                if cgroup_hint not in cgroups:
                    continue
            environ = (PROC / entry.name / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ + b"\0" and is_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def kill_pids(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def kill_marked(token: str, *, cgroup_hint: str | None = None, wait_s: float = 5.0) -> int:
    """SIGKILL every process carrying the marker until none is left; returns how many."""
    killed = 0
    deadline = time.monotonic() + wait_s
    while True:
        pids = marked_pids(token, cgroup_hint=cgroup_hint)
        if not pids:
            return killed
        kill_pids(pids)
        killed += len(pids)
        if time.monotonic() > deadline:
            return killed
        time.sleep(0.01)


def kill_process_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class ExitWatch:
    """Wait for a child's exit without waiting for its pipes (a pidfd; Linux >= 5.3).

    asyncio's ``Process.wait()`` also waits for stdout to close, which a forked-and-left child
    keeps open; the agent must notice the exit itself to kill such leftovers. Open the watch right
    after spawning: a pid already reaped counts as exited.
    """

    def __init__(self, pid: int) -> None:
        try:
            self._fd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:
            self._fd = None

    async def wait(self) -> None:
        if self._fd is None:
            return
        loop = asyncio.get_running_loop()
        exited: asyncio.Future[None] = loop.create_future()

        def on_readable() -> None:
            if not exited.done():
                exited.set_result(None)

        loop.add_reader(self._fd, on_readable)
        try:
            await exited
        finally:
            loop.remove_reader(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
